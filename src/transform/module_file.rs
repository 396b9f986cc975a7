//! Reading a module file: a regular file of bounded size that starts like a WebAssembly
//! component, or a clear refusal. A path naming a FIFO, a device or a huge file must not hang or
//! exhaust the loader: `check`, `serve` and the reload of a replaced module all go through here.

use std::io::Read;

/// The largest module file hookgate reads. A transform is a few MiB at most (a JavaScript
/// component embedding its engine is ~2 MiB); a file past this is refused before it is read.
pub const MAX_MODULE_BYTES: u64 = 64 * 1024 * 1024;

/// `\0asm` and the component binary format's version and layer (a core module has `1 0 0 0`).
const COMPONENT_PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

/// The flag every module file is opened with: opening a FIFO then returns at once instead of
/// waiting for a writer, and `fstat` then refuses it.
pub const OPEN_FLAGS: i32 = libc::O_NONBLOCK;

/// Reads an opened module whose `fstat` said `is_file` and `len`. The descriptor's own metadata
/// is what counts, not a path looked up again, so a file swapped in between is not read.
pub fn read(mut file: impl Read, is_file: bool, len: u64) -> Result<Vec<u8>, String> {
    if !is_file {
        return Err("not a regular file".into());
    }
    if len > MAX_MODULE_BYTES {
        return Err(format!(
            "{len} bytes, over the {MAX_MODULE_BYTES}-byte limit of a module file"
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
    file.take(MAX_MODULE_BYTES - 8 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_MODULE_BYTES {
        return Err(format!(
            "over the {MAX_MODULE_BYTES}-byte limit of a module file"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bounded_regular_component_files_are_read() {
        let component = [&COMPONENT_PREAMBLE[..], b"rest"].concat();
        assert_eq!(
            read(&component[..], true, component.len() as u64).unwrap(),
            component
        );
        assert!(
            read(&component[..], false, 12)
                .unwrap_err()
                .contains("regular")
        );
        let huge = read(&component[..], true, MAX_MODULE_BYTES + 1).unwrap_err();
        assert!(huge.contains("limit"), "{huge}");
        let core = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
        assert!(
            read(&core[..], true, 8)
                .unwrap_err()
                .contains("core module")
        );
        assert!(
            read(&b"hello world"[..], true, 11)
                .unwrap_err()
                .contains("magic")
        );
        assert!(
            read(&b"\0as"[..], true, 3)
                .unwrap_err()
                .contains("too short")
        );
    }
}
