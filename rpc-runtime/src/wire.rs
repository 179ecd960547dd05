//! The wire encoding of arguments and results.
//!
//! Every value crosses as explicit little-endian bytes at fixed offsets: the
//! encoding of a type is the same on NVPTX, AMDGCN and the host whatever the
//! compilers do with in-memory layout, and no padding byte is ever read as
//! data. Decoding validates what the device sent (`bool` must be 0 or 1, `char`
//! a Unicode scalar value, `usize` must fit), so the host never builds an
//! invalid value from untrusted memory.
//!
//! Implemented for the integer types, `f32`/`f64`, `bool`, `char`, `()`,
//! fixed arrays `[T; N]`, tuples up to 8 elements, `Option<T>`,
//! `Result<T, E>`, and (by
//! `#[derive(Wire)]` from `gpu_rpc`) `#[repr(C)]` structs whose fields are
//! `Wire`. `usize`/`isize` always cross as 8 bytes.
//!
//! ```
//! # use rpc_runtime as gpu_rpc;
//! use gpu_rpc::wire::{decode, encode, Wire};
//! let mut buf = [0u8; <(u32, bool, [u16; 2]) as Wire>::SIZE];
//! encode(&(7u32, true, [1u16, 2]), &mut buf);
//! assert_eq!(buf, [7, 0, 0, 0, 1, 1, 0, 2, 0]);
//! assert_eq!(decode::<(u32, bool, [u16; 2])>(&buf), Ok((7, true, [1, 2])));
//! assert!(decode::<bool>(&[2]).is_err());
//! ```

use core::fmt;

/// Why bytes from the other side are not a valid value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// A `bool` byte other than 0 or 1.
    InvalidBool(u8),
    /// A `char` that is not a Unicode scalar value.
    InvalidChar(u32),
    /// A `usize`/`isize` that does not fit this target.
    OutOfRange,
    /// An `Option` or `Result` tag other than 0 or 1.
    InvalidTag(u8),
    /// Fewer bytes than the type needs.
    Truncated,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::InvalidBool(b) => write!(f, "invalid bool byte {b:#04x}"),
            WireError::InvalidChar(c) => write!(f, "invalid char {c:#x}"),
            WireError::OutOfRange => write!(f, "integer out of range for this target"),
            WireError::InvalidTag(t) => write!(f, "invalid Option/Result tag {t}"),
            WireError::Truncated => write!(f, "truncated value"),
        }
    }
}

/// A type that crosses between device and host as `SIZE` bytes.
///
/// Implement it with `#[derive(Wire)]` (from `gpu_rpc`) for `#[repr(C)]`
/// structs; the derive encodes fields in declaration order without padding.
pub trait Wire: Sized {
    /// Encoded size in bytes (the same on every target).
    const SIZE: usize;
    /// A hash of the type's shape, mixed into each method's signature so that a
    /// host and a kernel built from different definitions refuse the call
    /// instead of misreading it.
    const SCHEMA: u32;
    /// Write the value into `out[..SIZE]`.
    fn encode(&self, out: &mut [u8]);
    /// Read a value from `bytes[..SIZE]`, validating it.
    fn decode(bytes: &[u8]) -> Result<Self, WireError>;
    /// The all-zero value (what a host-side out-buffer starts as).
    fn zeroed() -> Self;
    /// How CUDA C++ kernels spell this type ([`cpp`](crate::cpp)); `None`
    /// (the default) for a type without a C++ form: methods that use it are
    /// left out of the trait's C++ header.
    const CPP: Option<crate::cpp::CppType> = None;
    /// The raw bytes of a slice when they are exactly its encoding (`u8`,
    /// and the numbers on little-endian targets), so streams can copy
    /// without encoding element by element, and large slices can take the
    /// [direct path](crate::call#the-direct-path).
    #[inline(always)]
    fn slice_as_bytes(_items: &[Self]) -> Option<&[u8]> {
        None
    }
    /// The raw bytes of a mutable slice when they are exactly its encoding.
    /// `Some` only for types whose every byte pattern is a valid value
    /// (whatever is written through the bytes leaves valid elements; see
    /// [`bytes_are_values`]).
    #[inline(always)]
    fn slice_as_bytes_mut(_items: &mut [Self]) -> Option<&mut [u8]> {
        None
    }
}

/// Whether `T`'s values are their own encoding, byte for byte, with every
/// byte pattern a value (the numbers): `slice_as_bytes_mut` gives a view of
/// exactly an element's storage. A safe impl cannot pass this (a view of
/// `T`'s storage needs `unsafe`), so the server may zero such elements a
/// byte-wise pass at a time and read them as bytes.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::wire::bytes_are_values;
/// assert!(bytes_are_values::<u32>() && bytes_are_values::<u8>());
/// assert!(!bytes_are_values::<bool>() && !bytes_are_values::<(u8, u16)>());
/// ```
pub fn bytes_are_values<T: Wire>() -> bool {
    let mut probe = [T::zeroed()];
    let at = probe.as_ptr() as *const u8;
    core::mem::size_of::<T>() == T::SIZE
        && T::slice_as_bytes_mut(&mut probe).is_some_and(|b| b.len() == T::SIZE && core::ptr::eq(b.as_ptr(), at))
}

/// Encode `v` into `out[..T::SIZE]`.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// let mut b = [0u8; 2];
/// gpu_rpc::wire::encode(&0x1234u16, &mut b);
/// assert_eq!(b, [0x34, 0x12]);
/// ```
#[inline(always)]
pub fn encode<T: Wire>(v: &T, out: &mut [u8]) {
    v.encode(&mut out[..T::SIZE])
}

/// Decode a `T` from `bytes[..T::SIZE]`.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// assert_eq!(gpu_rpc::wire::decode::<char>(&[0x41, 0, 0, 0]), Ok('A'));
/// ```
#[inline(always)]
pub fn decode<T: Wire>(bytes: &[u8]) -> Result<T, WireError> {
    if bytes.len() < T::SIZE {
        return Err(WireError::Truncated);
    }
    T::decode(&bytes[..T::SIZE])
}

/// FNV-1a over `bytes`, continuing from `h`; usable in constants.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::wire::fnv1a;
/// assert_eq!(fnv1a(0x811c_9dc5, b""), 0x811c_9dc5);
/// assert_ne!(fnv1a(0x811c_9dc5, b"a"), fnv1a(0x811c_9dc5, b"b"));
/// ```
pub const fn fnv1a(mut h: u32, bytes: &[u8]) -> u32 {
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u32;
        h = h.wrapping_mul(0x0100_0193);
        i += 1;
    }
    h
}

/// Mix `x` into the hash `h`; usable in constants.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::wire::mix;
/// assert_ne!(mix(1, 2), mix(2, 1));
/// ```
pub const fn mix(h: u32, x: u32) -> u32 {
    fnv1a(fnv1a(h, b"|"), &x.to_le_bytes())
}

/// The FNV-1a offset basis, the start of every schema hash.
pub const SCHEMA_SEED: u32 = 0x811c_9dc5;

macro_rules! int_wire {
    ($($t:ty => $cpp:expr),*) => {$(
        impl Wire for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            const CPP: Option<crate::cpp::CppType> = $cpp;
            const SCHEMA: u32 = fnv1a(SCHEMA_SEED, stringify!($t).as_bytes());
            #[inline(always)]
            fn encode(&self, out: &mut [u8]) {
                out[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }
            #[inline(always)]
            fn decode(bytes: &[u8]) -> Result<Self, WireError> {
                let mut b = [0u8; core::mem::size_of::<$t>()];
                b.copy_from_slice(&bytes[..Self::SIZE]);
                Ok(<$t>::from_le_bytes(b))
            }
            #[inline(always)]
            fn zeroed() -> Self {
                0 as $t
            }
            #[cfg(target_endian = "little")]
            #[inline(always)]
            fn slice_as_bytes(items: &[Self]) -> Option<&[u8]> {
                // SAFETY: a number has no padding, and on a little-endian
                // target its bytes are its encoding; `u8` has alignment 1,
                // and the view covers exactly the slice's bytes.
                Some(unsafe { core::slice::from_raw_parts(items.as_ptr().cast(), core::mem::size_of_val(items)) })
            }
            #[cfg(target_endian = "little")]
            #[inline(always)]
            fn slice_as_bytes_mut(items: &mut [Self]) -> Option<&mut [u8]> {
                // SAFETY: as above; every byte pattern is a valid number, so
                // whatever is written through the view leaves valid values.
                Some(unsafe { core::slice::from_raw_parts_mut(items.as_mut_ptr().cast(), core::mem::size_of_val(items)) })
            }
        }
    )*};
}
int_wire!(
    u16 => crate::cpp::scalar(|w| w.write_str("unsigned short")),
    u32 => crate::cpp::scalar(|w| w.write_str("unsigned int")),
    u64 => crate::cpp::scalar(|w| w.write_str("unsigned long long")),
    u128 => None,
    i8 => crate::cpp::scalar(|w| w.write_str("signed char")),
    i16 => crate::cpp::scalar(|w| w.write_str("short")),
    i32 => crate::cpp::scalar(|w| w.write_str("int")),
    i64 => crate::cpp::scalar(|w| w.write_str("long long")),
    i128 => None,
    f32 => crate::cpp::scalar(|w| w.write_str("float")),
    f64 => crate::cpp::scalar(|w| w.write_str("double"))
);

impl Wire for u8 {
    const SIZE: usize = 1;
    const SCHEMA: u32 = fnv1a(SCHEMA_SEED, b"u8");
    const CPP: Option<crate::cpp::CppType> = crate::cpp::scalar(|w| w.write_str("unsigned char"));
    #[inline(always)]
    fn encode(&self, out: &mut [u8]) {
        out[0] = *self;
    }
    #[inline(always)]
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        Ok(bytes[0])
    }
    #[inline(always)]
    fn zeroed() -> Self {
        0
    }
    #[inline(always)]
    fn slice_as_bytes(items: &[Self]) -> Option<&[u8]> {
        Some(items)
    }
    #[inline(always)]
    fn slice_as_bytes_mut(items: &mut [Self]) -> Option<&mut [u8]> {
        Some(items)
    }
}

impl Wire for usize {
    const SIZE: usize = 8;
    const SCHEMA: u32 = fnv1a(SCHEMA_SEED, b"usize");
    const CPP: Option<crate::cpp::CppType> = crate::cpp::scalar(|w| w.write_str("unsigned long long"));
    #[inline(always)]
    fn encode(&self, out: &mut [u8]) {
        (*self as u64).encode(out)
    }
    #[inline(always)]
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        usize::try_from(u64::decode(bytes)?).map_err(|_| WireError::OutOfRange)
    }
    #[inline(always)]
    fn zeroed() -> Self {
        0
    }
}

impl Wire for isize {
    const SIZE: usize = 8;
    const SCHEMA: u32 = fnv1a(SCHEMA_SEED, b"isize");
    const CPP: Option<crate::cpp::CppType> = crate::cpp::scalar(|w| w.write_str("long long"));
    #[inline(always)]
    fn encode(&self, out: &mut [u8]) {
        (*self as i64).encode(out)
    }
    #[inline(always)]
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        isize::try_from(i64::decode(bytes)?).map_err(|_| WireError::OutOfRange)
    }
    #[inline(always)]
    fn zeroed() -> Self {
        0
    }
}

impl Wire for bool {
    const SIZE: usize = 1;
    const SCHEMA: u32 = fnv1a(SCHEMA_SEED, b"bool");
    const CPP: Option<crate::cpp::CppType> = crate::cpp::scalar(|w| w.write_str("bool"));
    #[inline(always)]
    fn encode(&self, out: &mut [u8]) {
        out[0] = *self as u8;
    }
    #[inline(always)]
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        match bytes[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(WireError::InvalidBool(b)),
        }
    }
    #[inline(always)]
    fn zeroed() -> Self {
        false
    }
}

impl Wire for char {
    const SIZE: usize = 4;
    const SCHEMA: u32 = fnv1a(SCHEMA_SEED, b"char");
    const CPP: Option<crate::cpp::CppType> = crate::cpp::scalar(|w| w.write_str("char32_t"));
    #[inline(always)]
    fn encode(&self, out: &mut [u8]) {
        (*self as u32).encode(out)
    }
    #[inline(always)]
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let c = u32::decode(bytes)?;
        char::from_u32(c).ok_or(WireError::InvalidChar(c))
    }
    #[inline(always)]
    fn zeroed() -> Self {
        '\0'
    }
}

impl Wire for () {
    const SIZE: usize = 0;
    const SCHEMA: u32 = fnv1a(SCHEMA_SEED, b"()");
    const CPP: Option<crate::cpp::CppType> = Some(crate::cpp::CppType {
        name: |w| w.write_str("gpu_rpc::Unit"),
        declare: |_| Ok(()),
        c_layout: false,
    });
    #[inline(always)]
    fn encode(&self, _out: &mut [u8]) {}
    #[inline(always)]
    fn decode(_bytes: &[u8]) -> Result<Self, WireError> {
        Ok(())
    }
    #[inline(always)]
    fn zeroed() -> Self {}
}

impl<T: Wire, const N: usize> Wire for [T; N] {
    const SIZE: usize = T::SIZE * N;
    const SCHEMA: u32 = mix(mix(fnv1a(SCHEMA_SEED, b"[;]"), T::SCHEMA), N as u32);
    const CPP: Option<crate::cpp::CppType> = crate::cpp::array::<T, N>();
    #[inline(always)]
    fn encode(&self, out: &mut [u8]) {
        for (i, v) in self.iter().enumerate() {
            v.encode(&mut out[i * T::SIZE..(i + 1) * T::SIZE]);
        }
    }
    #[inline(always)]
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut err = None;
        let arr = core::array::from_fn(|i| match T::decode(&bytes[i * T::SIZE..(i + 1) * T::SIZE]) {
            Ok(v) => v,
            Err(e) => {
                err = Some(e);
                T::zeroed()
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok(arr),
        }
    }
    #[inline(always)]
    fn zeroed() -> Self {
        core::array::from_fn(|_| T::zeroed())
    }
}

impl<T: Wire> Wire for Option<T> {
    const SIZE: usize = 1 + T::SIZE;
    const SCHEMA: u32 = mix(fnv1a(SCHEMA_SEED, b"Option"), T::SCHEMA);
    const CPP: Option<crate::cpp::CppType> = crate::cpp::option::<T>();
    #[inline(always)]
    fn encode(&self, out: &mut [u8]) {
        match self {
            None => out[..Self::SIZE].fill(0),
            Some(v) => {
                out[0] = 1;
                v.encode(&mut out[1..]);
            }
        }
    }
    #[inline(always)]
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        match bytes[0] {
            0 => Ok(None),
            1 => Ok(Some(T::decode(&bytes[1..])?)),
            t => Err(WireError::InvalidTag(t)),
        }
    }
    #[inline(always)]
    fn zeroed() -> Self {
        None
    }
}

macro_rules! tuple_wire {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: Wire),+> Wire for ($($name,)+) {
            const SIZE: usize = 0 $(+ $name::SIZE)+;
            const SCHEMA: u32 = {
                let h = fnv1a(SCHEMA_SEED, b"()");
                $(let h = mix(h, $name::SCHEMA);)+
                h
            };
            #[inline(always)]
            fn encode(&self, out: &mut [u8]) {
                let mut off = 0;
                $(
                    self.$idx.encode(&mut out[off..off + $name::SIZE]);
                    off += $name::SIZE;
                )+
                let _ = off;
            }
            #[inline(always)]
            fn decode(bytes: &[u8]) -> Result<Self, WireError> {
                let mut off = 0;
                Ok(($({
                    let v = $name::decode(&bytes[off..off + $name::SIZE])?;
                    off += $name::SIZE;
                    let _ = off;
                    v
                },)+))
            }
            #[inline(always)]
            fn zeroed() -> Self {
                ($($name::zeroed(),)+)
            }
        }
    };
}
tuple_wire!(A 0);
tuple_wire!(A 0, B 1);
tuple_wire!(A 0, B 1, C 2);
tuple_wire!(A 0, B 1, C 2, D 3);
tuple_wire!(A 0, B 1, C 2, D 3, E 4);
tuple_wire!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_wire!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_wire!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip<T: Wire + PartialEq + core::fmt::Debug>(v: T) {
        let mut buf = [0u8; 256];
        encode(&v, &mut buf);
        assert_eq!(decode::<T>(&buf).unwrap(), v);
    }

    #[test]
    fn roundtrips() {
        roundtrip(0xdead_beef_u32);
        roundtrip(-5i64);
        roundtrip(1.5f64);
        roundtrip(true);
        roundtrip('é');
        roundtrip([1u8, 2, 3]);
        roundtrip((1u8, 2u64, 'x', [true, false]));
        roundtrip(Some(9u16));
        roundtrip(None::<u16>);
        roundtrip(usize::MAX);
    }

    #[test]
    fn rejects_invalid() {
        assert_eq!(decode::<bool>(&[3]), Err(WireError::InvalidBool(3)));
        assert_eq!(
            decode::<char>(&0xD800u32.to_le_bytes()),
            Err(WireError::InvalidChar(0xD800))
        );
        assert_eq!(decode::<Option<u8>>(&[7, 0]), Err(WireError::InvalidTag(7)));
        assert_eq!(decode::<u32>(&[1, 2]), Err(WireError::Truncated));
        assert_eq!(decode::<[bool; 2]>(&[1, 9]), Err(WireError::InvalidBool(9)));
    }

    #[test]
    fn sizes_are_fixed() {
        assert_eq!(<(u8, u64)>::SIZE, 9);
        assert_eq!(<usize>::SIZE, 8);
        assert_eq!(<[char; 3]>::SIZE, 12);
        assert_ne!(<(u8, u64)>::SCHEMA, <(u64, u8)>::SCHEMA);
    }
}

/// `Result<T, E>` crosses as one tag byte (0 = `Ok`, 1 = `Err`) followed by
/// the payload, padded with zeros to `max(T::SIZE, E::SIZE)` bytes: errors are
/// values the device can match on. A tag other than 0 or 1 is refused
/// ([`WireError::InvalidTag`]).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::wire::{decode, encode, Wire, WireError};
/// type R = Result<u32, u8>;
/// assert_eq!(R::SIZE, 1 + 4);
/// let mut buf = [0xffu8; R::SIZE];
/// encode(&R::Err(7), &mut buf);
/// assert_eq!(buf, [1, 7, 0, 0, 0]);
/// assert_eq!(decode::<R>(&buf), Ok(Err(7)));
/// encode(&R::Ok(0x0102_0304), &mut buf);
/// assert_eq!(buf, [0, 4, 3, 2, 1]);
/// assert_eq!(decode::<R>(&[2, 0, 0, 0, 0]), Err(WireError::InvalidTag(2)));
/// ```
impl<T: Wire, E: Wire> Wire for Result<T, E> {
    const SIZE: usize = 1 + if T::SIZE > E::SIZE { T::SIZE } else { E::SIZE };
    const SCHEMA: u32 = mix(mix(fnv1a(SCHEMA_SEED, b"Result"), T::SCHEMA), E::SCHEMA);
    const CPP: Option<crate::cpp::CppType> = crate::cpp::result::<T, E>();
    #[inline(always)]
    fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..Self::SIZE];
        // No stale byte may follow the shorter payload.
        out.fill(0);
        match self {
            Ok(v) => v.encode(&mut out[1..1 + T::SIZE]),
            Err(e) => {
                out[0] = 1;
                e.encode(&mut out[1..1 + E::SIZE]);
            }
        }
    }
    #[inline(always)]
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        match bytes[0] {
            0 => Ok(Ok(T::decode(&bytes[1..1 + T::SIZE])?)),
            1 => Ok(Err(E::decode(&bytes[1..1 + E::SIZE])?)),
            t => Err(WireError::InvalidTag(t)),
        }
    }
    #[inline(always)]
    fn zeroed() -> Self {
        Ok(T::zeroed())
    }
}

#[cfg(test)]
mod result_tests {
    use super::*;

    #[test]
    fn result_roundtrips_and_pads() {
        type R = Result<u64, (u8, bool)>;
        assert_eq!(R::SIZE, 9);
        for v in [Ok(u64::MAX), Ok(0), Err((3, true)), Err((0, false))] {
            let mut buf = [0xaau8; 16];
            encode::<R>(&v, &mut buf);
            assert_eq!(decode::<R>(&buf), Ok(v));
            assert_eq!(buf[9..], [0xaa; 7], "writes exactly SIZE bytes");
        }
        let mut buf = [0xaau8; 9];
        encode::<R>(&Err((5, true)), &mut buf);
        assert_eq!(
            buf,
            [1, 5, 1, 0, 0, 0, 0, 0, 0],
            "zero padding after the shorter payload"
        );
    }

    #[test]
    fn result_unit_and_zero_sized() {
        type R = Result<(), i32>;
        assert_eq!(R::SIZE, 5);
        let mut buf = [0u8; 5];
        encode::<R>(&Ok(()), &mut buf);
        assert_eq!(buf, [0; 5]);
        assert_eq!(decode::<R>(&buf), Ok(Ok(())));
        assert_eq!(<Result<(), ()>>::SIZE, 1);
        assert_eq!(R::zeroed(), Ok(()));
    }

    #[test]
    fn result_rejects_invalid() {
        type R = Result<bool, char>;
        assert_eq!(decode::<R>(&[9, 0, 0, 0, 0]), Err(WireError::InvalidTag(9)));
        assert_eq!(decode::<R>(&[0, 2, 0, 0, 0]), Err(WireError::InvalidBool(2)));
        assert_eq!(decode::<R>(&[1, 0x00, 0xd8, 0, 0]), Err(WireError::InvalidChar(0xd800)));
        assert_eq!(decode::<R>(&[0, 1]), Err(WireError::Truncated));
    }

    #[test]
    fn result_schema_distinguishes() {
        assert_ne!(<Result<u32, u8>>::SCHEMA, <Result<u8, u32>>::SCHEMA);
        assert_ne!(<Result<u32, u8>>::SCHEMA, <Option<u32>>::SCHEMA);
        assert_ne!(<Result<u32, u8>>::SCHEMA, <(u32, u8)>::SCHEMA);
    }
}
