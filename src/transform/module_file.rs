//! Reading a module file: a regular file of bounded size that starts like a WebAssembly
//! component, or a clear refusal. A path naming a FIFO, a device or a huge file must not hang or
//! exhaust the loader: `check`, `serve` and the reload of a replaced module all go through here.

use std::io::Read;

/// The largest module file hookgate reads when no mapping grants more memory. A transform is a
/// few MiB at most (a JavaScript component embedding its engine is ~2 MiB); a file past the
/// bound is refused before it is read.
pub const MAX_MODULE_BYTES: u64 = 64 * 1024 * 1024;

/// The largest module file hookgate reads when the largest memory a mapping grants
/// (`memoryBytes`, what the engine's pool is sized for) is `memory_bytes`: that much, and at
/// least [`MAX_MODULE_BYTES`] (docs/transforms.md#limits). What a component's data segments hold
/// is copied into its memory, so a module of data larger than any mapping's memory could not
/// run anyway, while one that fits (a 200 MB table with 256 MiB granted) loads. Reading and
/// compiling a module costs about its size in memory, which the operator who granted that much
/// to a call has already allowed for.
pub fn max_module_bytes(memory_bytes: usize) -> u64 {
    u64::try_from(memory_bytes)
        .unwrap_or(u64::MAX)
        .max(MAX_MODULE_BYTES)
}

/// `\0asm` and the component binary format's version and layer (a core module has `1 0 0 0`).
const COMPONENT_PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

/// The flag every module file is opened with: opening a FIFO then returns at once instead of
/// waiting for a writer, and `fstat` then refuses it.
pub const OPEN_FLAGS: i32 = libc::O_NONBLOCK;

/// Reads an opened module whose `fstat` said `is_file` and `len`, of at most `max` bytes (see
/// [`max_module_bytes`]). The descriptor's own metadata is what counts, not a path looked up
/// again, so a file swapped in between is not read.
pub fn read(mut file: impl Read, is_file: bool, len: u64, max: u64) -> Result<Vec<u8>, String> {
    if !is_file {
        return Err("not a regular file".into());
    }
    if len > max {
        return Err(format!(
            "{len} bytes, over the {max}-byte limit of a module file (the largest \
             memoryBytes a mapping grants, and at least {MAX_MODULE_BYTES})"
        ));
    }
    let mut preamble = [0u8; 8];
    file.read_exact(&mut preamble)
        .map_err(|_| "not a WebAssembly component (too short)".to_string())?;
    if preamble[..4] != COMPONENT_PREAMBLE[..4] {
        return Err("not a WebAssembly file (no \\0asm magic number)".into());
    }
    if preamble != COMPONENT_PREAMBLE {
        return Err(
            "a WebAssembly core module, not a component (wrap it with `wasm-tools component new`)"
                .into(),
        );
    }
    let mut bytes = preamble.to_vec();
    // Bounded again: the file may grow between `fstat` and the read.
    file.take(max.saturating_sub(8).saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!("over the {max}-byte limit of a module file"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bounded_regular_component_files_are_read() {
        let max = MAX_MODULE_BYTES;
        let component = [&COMPONENT_PREAMBLE[..], b"rest"].concat();
        assert_eq!(
            read(&component[..], true, component.len() as u64, max).unwrap(),
            component
        );
        assert!(
            read(&component[..], false, 12, max)
                .unwrap_err()
                .contains("regular")
        );
        let huge = read(&component[..], true, max + 1, max).unwrap_err();
        assert!(huge.contains("limit"), "{huge}");
        let core = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
        assert!(
            read(&core[..], true, 8, max)
                .unwrap_err()
                .contains("core module")
        );
        assert!(
            read(&b"hello world"[..], true, 11, max)
                .unwrap_err()
                .contains("magic")
        );
        assert!(
            read(&b"\0as"[..], true, 3, max)
                .unwrap_err()
                .contains("too short")
        );
    }

    #[test]
    fn the_bound_follows_the_memory_granted_and_never_falls_below_64_mib() {
        assert_eq!(max_module_bytes(16 << 20), MAX_MODULE_BYTES);
        assert_eq!(max_module_bytes(256 << 20), 256 << 20);
        // A file that grows past the bound between `fstat` and the read is refused too.
        let grown = [&COMPONENT_PREAMBLE[..], &[0; 8]].concat();
        let refused = read(&grown[..], true, 12, 12).unwrap_err();
        assert!(refused.contains("12-byte limit"), "{refused}");
    }
}
