//! Host-formatted printing, host side: turns what a device's
//! [`Std::print`](super::Std::print) sent (a normalized format string, two
//! words per value, the text of the `str` values) into the line, with Rust's
//! formatting rules. The value itself is formatted by `std`'s own
//! implementations (so `{}` of an `f32` is exactly what `println!` prints);
//! only the spec's flags are chosen at run time, and fill/alignment applied
//! here.

use rpc_runtime::format_spec::{parse_spec, pieces, Align, Piece, Spec, Ty};

use super::print::PrintKind;
use super::IoError;

/// A decoded value.
#[derive(Clone, Copy, Debug)]
enum Value<'t> {
    Unsigned(u64),
    Signed(i64, u8),
    F32(f32),
    F64(f64),
    Bool(bool),
    Char(char),
    Str(&'t str),
    Io(IoError),
}

impl Value<'_> {
    fn numeric(&self) -> bool {
        matches!(
            self,
            Value::Unsigned(_) | Value::Signed(..) | Value::F32(_) | Value::F64(_)
        )
    }
}

/// Decode the values of a print; `EINVAL` for a kind this build does not
/// know, a `char` that is not a scalar value, or text lengths that exceed the
/// text sent.
fn decode<'t>(words: &[u64], text: &'t [u8]) -> Result<Vec<Value<'t>>, IoError> {
    if !words.len().is_multiple_of(2) {
        return Err(IoError::EINVAL);
    }
    let mut at = 0usize;
    words
        .chunks_exact(2)
        .map(|w| {
            let (head, bits) = (w[0], w[1]);
            let width = (head >> 8) as u8;
            let sent = (head >> 16) as usize;
            Ok(match PrintKind::from_u8(head as u8).ok_or(IoError::EINVAL)? {
                PrintKind::Unsigned => Value::Unsigned(bits),
                PrintKind::Signed => Value::Signed(bits as i64, width),
                PrintKind::F32 => Value::F32(f32::from_bits(bits as u32)),
                PrintKind::F64 => Value::F64(f64::from_bits(bits)),
                PrintKind::Bool => Value::Bool(bits != 0),
                PrintKind::Char => Value::Char(char::from_u32(bits as u32).ok_or(IoError::EINVAL)?),
                PrintKind::IoError => Value::Io(IoError::new(bits as i64 as i32)),
                PrintKind::Str => {
                    let end = at
                        .checked_add(sent)
                        .filter(|&e| e <= text.len())
                        .ok_or(IoError::EINVAL)?;
                    let bytes = &text[at..end];
                    at = end;
                    // A text the device cut at its buffer's end may end inside
                    // a character: keep the valid prefix.
                    Value::Str(match std::str::from_utf8(bytes) {
                        Ok(s) => s,
                        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
                    })
                }
            })
        })
        .collect()
}

/// `format!` with the spec's sign, `#`, zero-padded width and precision
/// chosen at run time, for the formatting trait `$t` (a literal such as
/// `"x"`).
macro_rules! flagged {
    ($v:expr, $s:expr, $zero_width:expr, $t:literal) => {{
        let v = $v;
        let w: usize = $zero_width.unwrap_or(0);
        let p: usize = $s.precision.unwrap_or(0);
        match ($s.plus, $s.alternate, $zero_width.is_some(), $s.precision.is_some()) {
            (false, false, false, false) => format!(concat!("{:", $t, "}"), v),
            (false, false, false, true) => format!(concat!("{:.p$", $t, "}"), v, p = p),
            (false, false, true, false) => format!(concat!("{:0w$", $t, "}"), v, w = w),
            (false, false, true, true) => format!(concat!("{:0w$.p$", $t, "}"), v, w = w, p = p),
            (false, true, false, false) => format!(concat!("{:#", $t, "}"), v),
            (false, true, false, true) => format!(concat!("{:#.p$", $t, "}"), v, p = p),
            (false, true, true, false) => format!(concat!("{:#0w$", $t, "}"), v, w = w),
            (false, true, true, true) => format!(concat!("{:#0w$.p$", $t, "}"), v, w = w, p = p),
            (true, false, false, false) => format!(concat!("{:+", $t, "}"), v),
            (true, false, false, true) => format!(concat!("{:+.p$", $t, "}"), v, p = p),
            (true, false, true, false) => format!(concat!("{:+0w$", $t, "}"), v, w = w),
            (true, false, true, true) => format!(concat!("{:+0w$.p$", $t, "}"), v, w = w, p = p),
            (true, true, false, false) => format!(concat!("{:+#", $t, "}"), v),
            (true, true, false, true) => format!(concat!("{:+#.p$", $t, "}"), v, p = p),
            (true, true, true, false) => format!(concat!("{:+#0w$", $t, "}"), v, w = w),
            (true, true, true, true) => format!(concat!("{:+#0w$.p$", $t, "}"), v, w = w, p = p),
        }
    }};
}

/// An integer of `width` bytes as the unsigned value of its two's
/// complement (what Rust's `{:x}`, `{:o}`, `{:b}` print for signed types).
fn twos(v: i64, width: u8) -> u64 {
    match width {
        1..=7 => v as u64 & ((1u64 << (8 * width as u32)) - 1),
        _ => v as u64,
    }
}

/// Format one value with `spec`; `None` when the value's type does not
/// implement the spec's formatting trait (`{:x}` of a float).
fn render(v: Value<'_>, spec: &Spec) -> Option<String> {
    // Sign-aware zero padding is the value's own (numbers only); any other
    // width is applied below with the fill and alignment.
    let zero_width = if spec.zero && v.numeric() { spec.width } else { None };
    let s = &spec;
    let body = match (v, spec.ty) {
        (Value::Unsigned(x), Ty::Display) => flagged!(x, s, zero_width, ""),
        (Value::Signed(x, _), Ty::Display) => flagged!(x, s, zero_width, ""),
        (Value::Unsigned(x), Ty::Debug) => flagged!(x, s, zero_width, "?"),
        (Value::Signed(x, _), Ty::Debug) => flagged!(x, s, zero_width, "?"),
        (Value::Unsigned(x), Ty::LowerExp) => flagged!(x, s, zero_width, "e"),
        (Value::Signed(x, _), Ty::LowerExp) => flagged!(x, s, zero_width, "e"),
        (Value::Unsigned(x), Ty::UpperExp) => flagged!(x, s, zero_width, "E"),
        (Value::Signed(x, _), Ty::UpperExp) => flagged!(x, s, zero_width, "E"),
        (Value::Unsigned(_) | Value::Signed(..), ty) => {
            let x = match v {
                Value::Unsigned(x) => x,
                Value::Signed(x, w) => twos(x, w),
                _ => unreachable!(),
            };
            match ty {
                Ty::LowerHex => flagged!(x, s, zero_width, "x"),
                Ty::UpperHex => flagged!(x, s, zero_width, "X"),
                Ty::Octal => flagged!(x, s, zero_width, "o"),
                Ty::Binary => flagged!(x, s, zero_width, "b"),
                Ty::DebugLowerHex => flagged!(x, s, zero_width, "x?"),
                Ty::DebugUpperHex => flagged!(x, s, zero_width, "X?"),
                _ => return None,
            }
        }
        (Value::F32(x), Ty::Display) => flagged!(x, s, zero_width, ""),
        (Value::F32(x), Ty::Debug) => flagged!(x, s, zero_width, "?"),
        (Value::F32(x), Ty::LowerExp) => flagged!(x, s, zero_width, "e"),
        (Value::F32(x), Ty::UpperExp) => flagged!(x, s, zero_width, "E"),
        (Value::F64(x), Ty::Display) => flagged!(x, s, zero_width, ""),
        (Value::F64(x), Ty::Debug) => flagged!(x, s, zero_width, "?"),
        (Value::F64(x), Ty::LowerExp) => flagged!(x, s, zero_width, "e"),
        (Value::F64(x), Ty::UpperExp) => flagged!(x, s, zero_width, "E"),
        (Value::Bool(x), Ty::Display) => flagged!(x, s, zero_width, ""),
        (Value::Bool(x), Ty::Debug) => flagged!(x, s, zero_width, "?"),
        (Value::Char(x), Ty::Display) => flagged!(x, s, zero_width, ""),
        (Value::Char(x), Ty::Debug) => flagged!(x, s, zero_width, "?"),
        (Value::Str(x), Ty::Display) => flagged!(x, s, zero_width, ""),
        (Value::Str(x), Ty::Debug) => flagged!(x, s, zero_width, "?"),
        // `IoError`'s `Display` writes its text without padding, as on the
        // host.
        (Value::Io(e), Ty::Display) => return Some(e.to_string()),
        (Value::Io(e), Ty::Debug) => return Some(format!("{e:?}")),
        _ => return None,
    };
    // `Debug` of `str` and `char` writes the quoted text without padding, as
    // in `std`.
    let unpadded = matches!((v, spec.ty), (Value::Str(_) | Value::Char(_), Ty::Debug));
    let Some(width) = spec.width.filter(|_| zero_width.is_none() && !unpadded) else {
        return Some(body);
    };
    let len = body.chars().count();
    if len >= width {
        return Some(body);
    }
    let pad = width - len;
    let align = spec
        .align
        .unwrap_or(if v.numeric() { Align::Right } else { Align::Left });
    let (pre, post) = match align {
        Align::Left => (0, pad),
        Align::Right => (pad, 0),
        Align::Center => (pad / 2, pad - pad / 2),
    };
    let mut out = String::with_capacity(body.len() + pad * spec.fill.len_utf8());
    out.extend(std::iter::repeat_n(spec.fill, pre));
    out.push_str(&body);
    out.extend(std::iter::repeat_n(spec.fill, post));
    Some(out)
}

/// Format a device's print into `out` (which bounds the line; see
/// [`FmtBuf`](super::FmtBuf)). `EINVAL` when the format string is not
/// normalized, names an argument that was not sent, has a spec this build
/// does not accept, or asks a value for a trait its type lacks; nothing is
/// written then.
pub(super) fn format_print(
    format: &str,
    words: &[u64],
    text: &[u8],
    out: &mut impl std::fmt::Write,
) -> Result<(), IoError> {
    let values = decode(words, text)?;
    let mut parts: Vec<std::borrow::Cow<'_, str>> = Vec::new();
    for piece in pieces(format) {
        match piece {
            Piece::Text(t) => parts.push(t.into()),
            Piece::Arg { index, spec } => {
                let v = *values.get(index).ok_or(IoError::EINVAL)?;
                let spec = parse_spec(spec).map_err(|_| IoError::EINVAL)?;
                parts.push(render(v, &spec).ok_or(IoError::EINVAL)?.into());
            }
            Piece::Malformed => return Err(IoError::EINVAL),
        }
    }
    for p in parts {
        // A full buffer stops early; it remembers the truncation.
        if out.write_str(&p).is_err() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Format `v` (a value of `$t`) with `$spec` both ways and compare.
    macro_rules! same {
        ($spec:literal, $($v:expr),+) => {$({
            let v = $v;
            let arg = super::super::print::PrintArg::new(&v);
            let words = arg.words(arg.text().len());
            let mut out = String::new();
            let fmt = concat!("<{0:", $spec, "}|");
            format_print(fmt, &words, arg.text().as_bytes(), &mut out)
                .unwrap_or_else(|e| panic!("{fmt} of {v:?}: {e}"));
            assert_eq!(out, format!(concat!("<{:", $spec, "}|"), v), "spec {:?} value {:?}", $spec, v);
        })+};
    }

    #[test]
    fn integers_match_std() {
        for spec_case in 0..1 {
            let _ = spec_case;
            same!("", 0u8, 255u8, -128i8, 42u32, -7i64, u64::MAX, i64::MIN, usize::MAX);
            same!(">6", 42u16, -42i32);
            same!("<6", 42u16, -42i32);
            same!("^7", 42u16, -42i32);
            same!("*^8", 42u64, -42i16);
            same!("+", 5u32, -5i32, 0i8);
            same!("08", 42u32, -42i32);
            same!("+08", 42u32, -42i32);
            same!("x", 255u8, -1i8, -1i16, -1i32, -1i64, 0xdead_beefu32);
            same!("#x", 255u8, -1i8);
            same!("#010x", 255u32, -2i16);
            same!("X", 255u64);
            same!("#X", 255u64);
            same!("o", 8u8, -1i8);
            same!("b", 5u8, -1i8, -3i32);
            same!("#b", 5u8);
            same!("e", 1234u32, -1234i64);
            same!("E", 1200u32);
            same!("?", 7u8, -7i8);
            same!("x?", 255u8, -1i8);
            same!("#X?", 255u16);
            same!("5?", 7u8);
            same!(".3", 7u8);
            same!(">+8", -3i8, 3u8);
            same!("é>5", 1u8);
        }
    }

    #[test]
    fn floats_match_std() {
        same!(
            "",
            0.1f32,
            1.0f32,
            -2.5f32,
            f32::NAN,
            f32::INFINITY,
            1e20f32,
            f32::MIN_POSITIVE
        );
        same!("", 0.1f64, 1.0f64, -2.5f64, f64::NEG_INFINITY, 1e300f64, 5e-324f64);
        same!("?", 1.0f32, 0.1f64, -0.0f64);
        same!(".3", 4.56789f32, -2.0f64, 1e10f64);
        same!(".0", 2.5f64, 3.5f64);
        same!("8.2", 4.56789f64, -4.56789f32);
        same!("08.2", 4.56789f64, -4.56789f64);
        same!("+.1", 1.25f64, -1.25f64);
        same!("<10", 1.5f32);
        same!("^10.1", 1.55f64);
        same!("e", 1234.5f64, 0.00012f32);
        same!(".2e", 1234.5f64);
        same!("E", 1234.5f64);
        same!("+010.3e", 1234.5f64);
        same!("#?", 1.0f64);
    }

    #[test]
    fn text_and_others_match_std() {
        same!("", "abc", "", "é日本", true, false, 'x', 'é');
        same!("?", "a\"b\n\u{7f}", "é", '\'', '\n', true);
        same!(">6", "ab", 'c', true);
        same!("-^7", "ab");
        same!("*<6", "ab", false);
        same!(".2", "abcdef", "éééé");
        same!("8.3", "abcdef");
        same!("05", "ab", 'c', true);
        same!("#?", "x");
        same!("10?", "ab");
    }

    #[test]
    fn io_errors_print_as_their_display() {
        for e in [IoError::ENOENT, IoError::new(1234)] {
            let arg = super::super::print::PrintArg::new(&e);
            let mut out = String::new();
            format_print("{0} / {0:>40}", &arg.words(0), b"", &mut out).unwrap();
            assert_eq!(out, format!("{e} / {e:>40}"));
        }
    }

    #[test]
    fn bad_input_is_einval_and_writes_nothing() {
        let one = super::super::print::PrintArg::new(&1u8).words(0);
        let s = super::super::print::PrintArg::new(&"abc");
        let cases: [(&str, Vec<u64>, &[u8]); 9] = [
            ("{1}", one.to_vec(), b""), // no such argument
            (
                "{0:x}",
                super::super::print::PrintArg::new(&1.0f64).words(0).to_vec(),
                b"",
            ), // no LowerHex for floats
            ("{0:q}", one.to_vec(), b""), // unknown spec
            ("{x}", one.to_vec(), b""), // not normalized
            ("{0", one.to_vec(), b""),  // unterminated
            ("}", one.to_vec(), b""),   // stray brace
            ("{0}", vec![99, 0], b""),  // unknown kind
            ("{0}", s.words(10).to_vec(), b"abc"), // text longer than sent
            ("{0}", vec![PrintKind::Char as u64, 0xd800], b""), // not a char
        ];
        for (fmt, words, text) in cases {
            let mut out = String::new();
            assert_eq!(
                format_print(fmt, &words, text, &mut out),
                Err(IoError::EINVAL),
                "{fmt} {words:?}"
            );
            assert_eq!(out, "", "{fmt}");
        }
        let mut out = String::new();
        assert_eq!(
            format_print("{0}", &[1], b"", &mut out),
            Err(IoError::EINVAL),
            "odd word count"
        );
    }

    #[test]
    fn escapes_and_several_texts() {
        let (a, b) = (
            super::super::print::PrintArg::new(&"ab"),
            super::super::print::PrintArg::new(&"cde"),
        );
        let words: Vec<u64> = [a.words(2), b.words(3)].concat();
        let mut out = String::new();
        format_print("{{{1}}} {0}{0} {1:>4}", &words, b"abcde", &mut out).unwrap();
        assert_eq!(out, "{cde} abab  cde");
    }
}
