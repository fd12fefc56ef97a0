//! The byte format of the engine targets' inputs: a forward-only reader for the fuzz
//! targets and the matching writer for the seed generator.
//!
//! All integers are big-endian. Reading past the end yields zeros (and empty slices), so
//! every byte string is a valid input; the targets stop at the first op that starts at
//! the end of the input.

/// Reads an input front to back.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { rest: data }
    }

    /// Whether everything has been read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = rest;
        head
    }

    /// A byte string prefixed by its u16 length.
    pub fn prefixed(&mut self) -> &'a [u8] {
        let n = usize::from(self.u16());
        self.bytes(n)
    }

    /// A byte string prefixed by its u8 length.
    pub fn short(&mut self) -> &'a [u8] {
        let n = usize::from(self.u8());
        self.bytes(n)
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0; N];
        let b = self.bytes(N);
        a[..b.len()].copy_from_slice(b);
        a
    }

    /// One byte, 0 at the end.
    pub fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    /// A big-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.array())
    }

    /// A big-endian u32.
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.array())
    }

    /// A big-endian u64.
    pub fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.array())
    }
}

/// Writes inputs in the format [`Reader`] reads (seed generation).
#[derive(Debug, Default)]
pub struct Writer {
    /// The input written so far.
    pub out: Vec<u8>,
}

impl Writer {
    /// One byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.out.push(v);
        self
    }

    /// A big-endian u16.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A big-endian u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A big-endian u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.out.extend_from_slice(b);
        self
    }

    /// A byte string prefixed by its u16 length (panics above 65535 bytes: seeds only).
    pub fn prefixed(&mut self, b: &[u8]) -> &mut Self {
        let n = u16::try_from(b.len()).expect("seed byte string longer than 65535");
        self.u16(n).bytes(b)
    }

    /// A byte string prefixed by its u8 length (panics above 255 bytes: seeds only).
    pub fn short(&mut self, b: &[u8]) -> &mut Self {
        let n = u8::try_from(b.len()).expect("seed byte string longer than 255");
        self.u8(n).bytes(b)
    }
}
