//! Where the host lowers a call's request. The canonical ABI has the guest allocate each string
//! and list of `transform`'s argument through `cabi_realloc`, one call of the host's into the
//! guest per string, and the bindings hand each back to Rust's allocator when the request is
//! dropped: with malloc and free, about 400 of the guest's instructions per string, a fifth of
//! them the host's calls' own (docs/performance.md, "QuickJS's own costs"). They are served
//! instead from a region of the instance's own, bumped per allocation and emptied whole when the
//! call ends ([`empty`]); Rust's allocator frees nothing in it and moves a block out of it when
//! the block grows. What does not fit goes to malloc, as before.
//!
//! Nothing lowered may outlive the call in the region: the request's strings are copied into
//! JavaScript strings or dropped, and the body, which `ctx.body` keeps (a transform may hold it
//! past the call on a kept instance), is moved out first ([`owned`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The region's size: a request's strings and lists but a large body fit.
const REGION_BYTES: usize = 16 * 1024;

/// The region, aligned for any type the ABI lowers.
#[repr(C, align(16))]
struct Region(UnsafeCell<[u8; REGION_BYTES]>);

// SAFETY: a WebAssembly instance has one thread; natively only one test bumps the region (the
// offset's load and store are not one atomic step, so two threads could share a range).
unsafe impl Sync for Region {}

static REGION: Region = Region(UnsafeCell::new([0; REGION_BYTES]));

/// The offset of the region's first free byte.
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Whether `ptr` points into the region.
fn holds(ptr: *const u8) -> bool {
    (ptr as usize).wrapping_sub(REGION.0.get() as usize) < REGION_BYTES
}

/// `len` bytes (not zero) aligned to `align` (a power of two) from the region, or null when it
/// has no room left.
fn bump(align: usize, len: usize) -> *mut u8 {
    let start = REGION.0.get() as usize;
    let next = NEXT.load(Ordering::Relaxed);
    let at = (start + next).next_multiple_of(align) - start;
    match at.checked_add(len) {
        Some(end) if end <= REGION_BYTES => {
            NEXT.store(end, Ordering::Relaxed);
            // SAFETY: `at + len` is within the region.
            unsafe { REGION.0.get().cast::<u8>().add(at) }
        }
        _ => std::ptr::null_mut(),
    }
}

/// The canonical ABI's allocator, as wit-bindgen's (`new_len` bytes aligned to `align`; a zero
/// size is `align` itself; a block with `old_len` bytes is grown by Rust's allocator), but a
/// new block comes from the region while it has room.
///
/// # Safety
///
/// `old_ptr` is null with `old_len` zero, or a block of Rust's allocator (or the region's) of
/// `old_len` bytes aligned to `align`, a power of two.
#[cfg_attr(
    not(any(target_family = "wasm", test)),
    expect(dead_code, reason = "natively only the tests lower a request")
)]
pub unsafe fn lower(old_ptr: *mut u8, old_len: usize, align: usize, new_len: usize) -> *mut u8 {
    if old_len == 0 {
        if new_len == 0 {
            return align as *mut u8;
        }
        let ptr = bump(align, new_len);
        if !ptr.is_null() {
            return ptr;
        }
        // SAFETY: the size is not zero, and the caller gives a power of two.
        return unsafe { std::alloc::alloc(Layout::from_size_align_unchecked(new_len, align)) };
    }
    // SAFETY: the caller's block, of this size and alignment.
    unsafe {
        std::alloc::realloc(
            old_ptr,
            Layout::from_size_align_unchecked(old_len, align),
            new_len,
        )
    }
}

/// The export the host calls; a null block (malloc's memory exhausted) traps, as wit-bindgen's
/// does in a release build.
///
/// # Safety
///
/// As [`lower`].
#[cfg(target_family = "wasm")]
#[unsafe(export_name = "cabi_realloc")]
pub unsafe extern "C" fn cabi_realloc(
    old_ptr: *mut u8,
    old_len: usize,
    align: usize,
    new_len: usize,
) -> *mut u8 {
    // SAFETY: the host passes what the canonical ABI's `realloc` is given.
    let ptr = unsafe { lower(old_ptr, old_len, align, new_len) };
    if ptr.is_null() {
        core::arch::wasm32::unreachable();
    }
    ptr
}

/// Rust's allocator: the system's (malloc), except for a block in the region, which is not
/// freed (the region is emptied whole) and is moved out when it is grown.
pub struct Allocator;

// SAFETY: every block comes from `System`, or from the region, where no two blocks overlap
// until the region is emptied with none left in use.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !holds(ptr) {
            // SAFETY: a block of `System`'s, as the caller's.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !holds(ptr) {
            // SAFETY: a block of `System`'s, as the caller's.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller gives a valid size for the block's alignment.
        let moved =
            unsafe { System.alloc(Layout::from_size_align_unchecked(new_size, layout.align())) };
        if !moved.is_null() {
            // SAFETY: both blocks hold the bytes copied, and the new one is not in the region.
            unsafe { std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size)) };
        }
        moved
    }
}

/// Natively too, so that the runtime's tests run the same allocator.
#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

/// Empties the region: called when a call has ended, when nothing lowered for it is in use.
pub fn empty() {
    NEXT.store(0, Ordering::Relaxed);
}

/// `bytes`, moved out of the region when it is there (with room for `spare` more), for a buffer
/// that may outlive the call.
pub fn owned(bytes: Vec<u8>, spare: usize) -> Vec<u8> {
    if !holds(bytes.as_ptr()) {
        return bytes;
    }
    let mut moved = Vec::with_capacity(bytes.len() + spare);
    moved.extend_from_slice(&bytes);
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The region serves aligned, disjoint blocks until it is full, then malloc does; a block
    /// grown leaves it with its bytes, and `owned` moves a buffer out. One test, since the region
    /// is the process's.
    #[test]
    fn the_region_serves_a_call_and_lets_nothing_outlive_it() {
        empty();
        // SAFETY: new blocks (old_len 0), powers of two.
        let (a, b, c) = unsafe {
            (
                lower(ptr(), 0, 1, 3),
                lower(ptr(), 0, 8, 16),
                lower(ptr(), 0, 4, 0),
            )
        };
        assert!(holds(a) && holds(b));
        assert_eq!((b as usize % 8, b as usize - a as usize), (0, 8));
        assert_eq!(c as usize, 4, "a zero size is its alignment");
        // SAFETY: as above; the region has no room for it.
        let large = unsafe { lower(ptr(), 0, 1, REGION_BYTES) };
        assert!(!large.is_null() && !holds(large));
        // SAFETY: `large` is malloc's, of that size.
        unsafe { std::alloc::dealloc(large, Layout::from_size_align(REGION_BYTES, 1).unwrap()) };

        let text = lowered(b"headers");
        assert!(holds(text.as_ptr()));
        let mut grown = text.clone();
        grown.push_str(", more");
        let mut text = text;
        text.push('!');
        assert!(!holds(text.as_ptr()), "a block grown moves out");
        assert_eq!(
            (text.as_str(), grown.as_str()),
            ("headers!", "headers, more")
        );

        let body = lowered(b"{}").into_bytes();
        let body = owned(body, 1);
        assert!(!holds(body.as_ptr()) && body.capacity() >= 3);
        assert_eq!(body, b"{}");
        empty();
        // SAFETY: a new block.
        assert_eq!(
            unsafe { lower(ptr(), 0, 1, 1) },
            REGION.0.get().cast::<u8>()
        );
    }

    fn ptr() -> *mut u8 {
        std::ptr::null_mut()
    }

    /// `text` lowered into the region and lifted as the bindings lift a string.
    fn lowered(text: &[u8]) -> String {
        // SAFETY: a new block of the string's length.
        let at = unsafe { lower(ptr(), 0, 1, text.len()) };
        // SAFETY: the block holds `text.len()` bytes, UTF-8, and belongs to the string, which
        // Rust's allocator (this module's) frees and grows.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), at, text.len());
            String::from_raw_parts(at, text.len(), text.len())
        }
    }
}
