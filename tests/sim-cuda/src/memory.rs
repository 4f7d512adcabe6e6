//! Device memory with contents, for what the probe reads back: the correctness canary's
//! results. A buffer gets real bytes when something writes it (a copy, a memset, a kernel or
//! GEMM the simulation computes); buffers over `MAX_BACKED` stay without contents (writes
//! dropped, reads zeros), so the throughput tests' large buffers cost nothing.

use std::collections::BTreeMap;

/// The largest buffer given real bytes: the canary's, at the simulation's 2 SMs, are at most
/// 1 MiB; the throughput tests' (16 MiB and more) stay without contents, so their copies cost
/// nothing real.
pub const MAX_BACKED: usize = 8 << 20;

struct Buffer {
    len: usize,
    data: Option<Vec<u8>>,
    /// Bumped at every write: a GEMM whose inputs did not change need not be computed again.
    version: u64,
}

#[derive(Default)]
pub struct Memory {
    buffers: BTreeMap<u64, Buffer>,
}

impl Memory {
    pub fn alloc(&mut self, base: u64, len: usize) {
        self.buffers.insert(
            base,
            Buffer {
                len,
                data: None,
                version: 0,
            },
        );
    }

    pub fn free(&mut self, base: u64) {
        self.buffers.remove(&base);
    }

    /// The buffer holding `ptr`, and the offset of `ptr` in it.
    fn find(&mut self, ptr: u64) -> Option<(&mut Buffer, usize)> {
        let (base, buffer) = self.buffers.range_mut(..=ptr).next_back()?;
        let offset = (ptr - base) as usize;
        (offset < buffer.len).then_some((buffer, offset))
    }

    /// The buffer's bytes, made on first use (None when it is too large to hold).
    fn bytes(buffer: &mut Buffer) -> Option<&mut Vec<u8>> {
        if buffer.len > MAX_BACKED {
            return None;
        }
        Some(buffer.data.get_or_insert_with(|| vec![0; buffer.len]))
    }

    pub fn write(&mut self, ptr: u64, bytes: &[u8]) {
        if let Some((buffer, offset)) = self.find(ptr) {
            buffer.version += 1;
            if let Some(data) = Self::bytes(buffer) {
                let end = (offset + bytes.len()).min(data.len());
                data[offset..end].copy_from_slice(&bytes[..end - offset]);
            }
        }
    }

    /// `len` bytes from `ptr`: zeros where nothing was written.
    pub fn read(&mut self, ptr: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        if let Some((buffer, offset)) = self.find(ptr)
            && let Some(data) = buffer.data.as_ref()
        {
            let end = (offset + len).min(data.len());
            out[..end - offset].copy_from_slice(&data[offset..end]);
        }
        out
    }

    pub fn fill(&mut self, ptr: u64, byte: u8, len: usize) {
        if let Some((buffer, offset)) = self.find(ptr) {
            buffer.version += 1;
            if buffer.data.is_none() && byte == 0 {
                return; // reads as zeros already
            }
            if let Some(data) = Self::bytes(buffer) {
                let end = (offset + len).min(data.len());
                data[offset..end].fill(byte);
            }
        }
    }

    /// Whether `len` bytes at `ptr` can hold contents.
    pub fn holds(&mut self, ptr: u64, len: usize) -> bool {
        self.find(ptr)
            .is_some_and(|(buffer, offset)| buffer.len <= MAX_BACKED && offset + len <= buffer.len)
    }

    /// The version of the buffer holding `ptr`.
    pub fn version(&mut self, ptr: u64) -> u64 {
        self.find(ptr).map_or(0, |(buffer, _)| buffer.version)
    }
}
