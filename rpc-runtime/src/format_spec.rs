//! The format-spec grammar of host-formatted printing (`no_std`), written
//! once: `gpu_println!` checks and normalizes format strings with it at
//! compile time, and the host parses the normalized strings it receives with
//! it at run time.
//!
//! A *spec* is what follows the `:` of a placeholder, Rust's grammar minus
//! run-time widths and precisions:
//!
//! ```text
//! [[fill]align][sign]['#']['0'][width]['.' precision][type]
//! align := '<' | '^' | '>'     sign := '+' | '-'
//! type  := '' | '?' | 'x' | 'X' | 'o' | 'b' | 'e' | 'E' | 'x?' | 'X?'
//! ```
//!
//! A *normalized* format string (what crosses to the host) has only
//! positional placeholders `{N}` / `{N:spec}`, with `N` the index of the
//! argument the device sent, and `{{` / `}}` escapes; [`pieces`] walks one.
//!
//! ```
//! # use rpc_runtime as gpu_rpc;
//! use gpu_rpc::format_spec::{parse_spec, Align, Piece, pieces, Ty};
//! let s = parse_spec("*^+#010.3x").unwrap();
//! assert_eq!((s.fill, s.align, s.plus, s.alternate, s.zero), ('*', Some(Align::Center), true, true, true));
//! assert_eq!((s.width, s.precision, s.ty), (Some(10), Some(3), Ty::LowerHex));
//! let all: Vec<_> = pieces("a {0:>4} {{b}} {1}").collect();
//! assert_eq!(all[1], Piece::Arg { index: 0, spec: ">4" });
//! assert_eq!(all[3], Piece::Text("{"));
//! ```

/// Alignment of a padded value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// `<`
    Left,
    /// `^`
    Center,
    /// `>`
    Right,
}

/// The formatting trait a spec selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// `{}`: `Display`.
    Display,
    /// `{:?}`: `Debug`.
    Debug,
    /// `{:x}`
    LowerHex,
    /// `{:X}`
    UpperHex,
    /// `{:o}`
    Octal,
    /// `{:b}`
    Binary,
    /// `{:e}`
    LowerExp,
    /// `{:E}`
    UpperExp,
    /// `{:x?}`: `Debug` with hexadecimal integers.
    DebugLowerHex,
    /// `{:X?}`: `Debug` with hexadecimal integers.
    DebugUpperHex,
}

/// A parsed spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Fill character (default `' '`).
    pub fill: char,
    /// Explicit alignment, if any.
    pub align: Option<Align>,
    /// `+`: always print the sign.
    pub plus: bool,
    /// `#`: the alternate form.
    pub alternate: bool,
    /// `0`: sign-aware zero padding (overrides fill and alignment).
    pub zero: bool,
    /// Minimum width in characters.
    pub width: Option<usize>,
    /// Precision (digits after the point; characters of a string).
    pub precision: Option<usize>,
    /// The formatting trait.
    pub ty: Ty,
}

/// Why a spec or format string was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// Width or precision given at run time (`name$`, `N$`, `*`).
    RuntimeWidth,
    /// A number too large.
    Overflow,
    /// Something else after the recognized parts (for example an unknown
    /// type).
    Invalid,
}

impl core::fmt::Display for SpecError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SpecError::RuntimeWidth => "width or precision given at run time (`$` or `*`) is not supported",
            SpecError::Overflow => "width or precision too large",
            SpecError::Invalid => "unsupported format spec (types: none, ?, x, X, o, b, e, E, x?, X?)",
        })
    }
}

/// Largest width or precision accepted (a device cannot make the host
/// allocate more than this per placeholder).
pub const MAX_WIDTH: usize = 1024;

fn align_of(c: char) -> Option<Align> {
    match c {
        '<' => Some(Align::Left),
        '^' => Some(Align::Center),
        '>' => Some(Align::Right),
        _ => None,
    }
}

/// Parse a spec (the text after `:`).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::format_spec::{parse_spec, SpecError};
/// assert!(parse_spec("").is_ok());
/// assert_eq!(parse_spec("w$").unwrap_err(), SpecError::RuntimeWidth);
/// assert_eq!(parse_spec(".*").unwrap_err(), SpecError::RuntimeWidth);
/// assert_eq!(parse_spec("q").unwrap_err(), SpecError::Invalid);
/// ```
pub fn parse_spec(s: &str) -> Result<Spec, SpecError> {
    let mut spec = Spec {
        fill: ' ',
        align: None,
        plus: false,
        alternate: false,
        zero: false,
        width: None,
        precision: None,
        ty: Ty::Display,
    };
    let mut rest = s;
    let mut chars = rest.chars();
    if let (Some(c0), Some(c1)) = (chars.next(), chars.next()) {
        if let Some(a) = align_of(c1) {
            spec.fill = c0;
            spec.align = Some(a);
            rest = &rest[c0.len_utf8() + 1..];
        } else if let Some(a) = align_of(c0) {
            spec.align = Some(a);
            rest = &rest[1..];
        }
    } else if let Some(a) = rest.chars().next().and_then(align_of) {
        spec.align = Some(a);
        rest = &rest[1..];
    }
    if let Some(r) = rest.strip_prefix('+') {
        spec.plus = true;
        rest = r;
    } else if let Some(r) = rest.strip_prefix('-') {
        rest = r;
    }
    if let Some(r) = rest.strip_prefix('#') {
        spec.alternate = true;
        rest = r;
    }
    if let Some(r) = rest.strip_prefix('0') {
        // `0` followed by `$` is argument 0 as a width, not the zero flag.
        if !r.starts_with('$') {
            spec.zero = true;
            rest = r;
        }
    }
    let (width, r) = number(rest)?;
    spec.width = width;
    rest = r;
    if rest.starts_with('$') || rest.starts_with('*') {
        return Err(SpecError::RuntimeWidth);
    }
    if let Some(r) = rest.strip_prefix('.') {
        let (p, r) = number(r)?;
        if r.starts_with('$') || r.starts_with('*') {
            return Err(SpecError::RuntimeWidth);
        }
        spec.precision = Some(p.ok_or(SpecError::Invalid)?);
        rest = r;
    }
    spec.ty = match rest {
        "" => Ty::Display,
        "?" => Ty::Debug,
        "x" => Ty::LowerHex,
        "X" => Ty::UpperHex,
        "o" => Ty::Octal,
        "b" => Ty::Binary,
        "e" => Ty::LowerExp,
        "E" => Ty::UpperExp,
        "x?" => Ty::DebugLowerHex,
        "X?" => Ty::DebugUpperHex,
        _ if rest.ends_with('$') || rest.contains('*') => return Err(SpecError::RuntimeWidth),
        _ if rest.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_') => {
            // `name$` as a width.
            if rest.contains('$') {
                return Err(SpecError::RuntimeWidth);
            }
            return Err(SpecError::Invalid);
        }
        _ => return Err(SpecError::Invalid),
    };
    Ok(spec)
}

fn number(s: &str) -> Result<(Option<usize>, &str), SpecError> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Ok((None, s));
    }
    let mut v: usize = 0;
    for b in s[..digits].bytes() {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add((b - b'0') as usize))
            .ok_or(SpecError::Overflow)?;
    }
    if v > MAX_WIDTH {
        return Err(SpecError::Overflow);
    }
    Ok((Some(v), &s[digits..]))
}

/// One piece of a normalized format string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Literal text (escapes already resolved: `{{` yields `"{"`).
    Text(&'a str),
    /// Argument `index` formatted with `spec` (unparsed; see [`parse_spec`]).
    Arg {
        /// Index of the argument.
        index: usize,
        /// The spec text after `:` (empty for `{N}`).
        spec: &'a str,
    },
    /// Something that is not a normalized placeholder (an unmatched brace, a
    /// name instead of an index): the string is malformed.
    Malformed,
}

/// The pieces of a normalized format string, in order.
pub fn pieces(fmt: &str) -> Pieces<'_> {
    Pieces { rest: fmt }
}

/// Iterator returned by [`pieces`]; stops after the first
/// [`Piece::Malformed`].
#[derive(Clone, Debug)]
pub struct Pieces<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = Piece<'a>;

    fn next(&mut self) -> Option<Piece<'a>> {
        let s = self.rest;
        if s.is_empty() {
            return None;
        }
        if let Some(r) = s.strip_prefix("{{") {
            self.rest = r;
            return Some(Piece::Text("{"));
        }
        if let Some(r) = s.strip_prefix("}}") {
            self.rest = r;
            return Some(Piece::Text("}"));
        }
        if s.starts_with('}') {
            self.rest = "";
            return Some(Piece::Malformed);
        }
        if let Some(r) = s.strip_prefix('{') {
            let Some(close) = r.find('}') else {
                self.rest = "";
                return Some(Piece::Malformed);
            };
            let inner = &r[..close];
            self.rest = &r[close + 1..];
            let (idx, spec) = match inner.find(':') {
                Some(c) => (&inner[..c], &inner[c + 1..]),
                None => (inner, ""),
            };
            return match idx.parse::<usize>() {
                Ok(index) if !idx.is_empty() && idx.bytes().all(|b| b.is_ascii_digit()) => {
                    Some(Piece::Arg { index, spec })
                }
                _ => {
                    self.rest = "";
                    Some(Piece::Malformed)
                }
            };
        }
        let end = s.find(['{', '}']).unwrap_or(s.len());
        self.rest = &s[end..];
        Some(Piece::Text(&s[..end]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let s = parse_spec(">8").unwrap();
        assert_eq!((s.fill, s.align, s.width), (' ', Some(Align::Right), Some(8)));
        let s = parse_spec("<").unwrap();
        assert_eq!(s.align, Some(Align::Left));
        let s = parse_spec("08.2e").unwrap();
        assert_eq!(
            (s.zero, s.width, s.precision, s.ty),
            (true, Some(8), Some(2), Ty::LowerExp)
        );
        let s = parse_spec("é<5").unwrap();
        assert_eq!((s.fill, s.width), ('é', Some(5)));
        let s = parse_spec("-#?").unwrap();
        assert_eq!((s.alternate, s.ty), (true, Ty::Debug));
        assert_eq!(parse_spec("0$").unwrap_err(), SpecError::RuntimeWidth);
        assert_eq!(parse_spec("width$").unwrap_err(), SpecError::RuntimeWidth);
        assert_eq!(parse_spec("99999").unwrap_err(), SpecError::Overflow);
        assert_eq!(parse_spec(".").unwrap_err(), SpecError::Invalid);
    }

    #[test]
    fn malformed_strings_stop() {
        let v: Vec<_> = pieces("a {x} b").collect();
        assert_eq!(v, [Piece::Text("a "), Piece::Malformed]);
        let v: Vec<_> = pieces("{0").collect();
        assert_eq!(v, [Piece::Malformed]);
        let v: Vec<_> = pieces("}").collect();
        assert_eq!(v, [Piece::Malformed]);
        let v: Vec<_> = pieces("{}").collect();
        assert_eq!(v, [Piece::Malformed]);
    }
}
