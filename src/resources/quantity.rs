//! One quantity: parsed the way Kubernetes parses it (decimal and binary suffixes, exponents,
//! rounded up to milli-units), formatted back, and described for people.

use super::QuantityError;

/// Why a quantity is refused. The first three are apimachinery's own refusals.
pub(super) const NOT_A_QUANTITY: &str =
    "not a quantity: a number with an optional suffix, such as 500m, 1.5, 8Gi or 1e3";
pub(super) const UNKNOWN_SUFFIX: &str =
    "unknown suffix: n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3";
pub(super) const NO_DIGITS: &str = "no digits";
pub const TOO_LARGE: &str = "too large: sluice counts up to 9223372036854775807m";
pub(super) const NEGATIVE: &str = "must not be negative";

/// Parses an amount of a resource: a quantity, not negative.
pub fn parse_amount(text: &str) -> Result<i64, QuantityError> {
    match parse_quantity(text)? {
        value if value < 0 => Err(QuantityError {
            quantity: text.to_string(),
            reason: NEGATIVE,
        }),
        value => Ok(value),
    }
}

/// Parses a Kubernetes quantity ("4", "500m", "1.5", "8Gi", "1e3", "100M") into milli-units,
/// rounding the magnitude up as Kubernetes does when a value has more precision than a milli-unit.
///
/// It accepts and refuses exactly what Kubernetes does when it reads a quantity from an object
/// (`Quantity.UnmarshalJSON`: `ParseQuantity(strings.TrimSpace(s))`, apimachinery v0.36.3), quirks
/// included, with the same value; a value beyond an i64 of milli-units is refused as too large.
/// The work is proportional to the text's length, never to an exponent. Checked against Kubernetes
/// itself: see `quantities_parse_as_kubernetes_parses_them` below.
pub fn parse_quantity(text: &str) -> Result<i64, QuantityError> {
    let err = |reason| QuantityError {
        quantity: text.to_string(),
        reason,
    };
    let parts = Parts::split(text.trim()).ok_or_else(|| err(NOT_A_QUANTITY))?;
    let suffix = Suffix::interpret(parts.suffix).ok_or_else(|| err(UNKNOWN_SUFFIX))?;
    let slow = parts.slow_path(suffix);
    if !parts.has_digits {
        // The slow path reads the number's text and finds no digit; the int64 one reads zero.
        return if slow { Err(err(NO_DIGITS)) } else { Ok(0) };
    }
    let (exp10, exp2) = parts.scale(suffix, slow);
    let digits = [parts.whole, parts.fraction].concat();
    let magnitude = milli_magnitude(&digits, exp10 + 3, exp2).ok_or_else(|| err(TOO_LARGE))?;
    Ok(if parts.negative {
        -magnitude
    } else {
        magnitude
    })
}

/// A quantity's text cut as apimachinery's `parseQuantityString` cuts it:
/// `[+-]? digits* (. digits*)? [eEinumkKMGTP]* [+-]? digits*`, nothing else.
pub(super) struct Parts<'a> {
    pub(super) negative: bool,
    /// Whether the number has a digit at all: `.`, `-` and `e3` have none.
    pub(super) has_digits: bool,
    /// The digits before the point, leading zeros removed.
    pub(super) whole: &'a [u8],
    pub(super) fraction: &'a [u8],
    pub(super) suffix: &'a [u8],
}

impl<'a> Parts<'a> {
    pub(super) fn split(text: &'a str) -> Option<Self> {
        let b = text.as_bytes();
        if b.is_empty() {
            return None;
        }
        let (negative, mut pos) = match b[0] {
            b'-' => (true, 1),
            b'+' => (false, 1),
            _ => (false, 0),
        };
        let count = |from: usize, accept: fn(&u8) -> bool| {
            b[from..].iter().take_while(|c| accept(c)).count()
        };
        let zeros = count(pos, |c| *c == b'0');
        pos += zeros;
        let whole = &b[pos..pos + count(pos, u8::is_ascii_digit)];
        pos += whole.len();
        let mut fraction: &[u8] = &[];
        if b.get(pos) == Some(&b'.') {
            pos += 1;
            fraction = &b[pos..pos + count(pos, u8::is_ascii_digit)];
            pos += fraction.len();
        }
        let suffix = &b[pos..];
        pos += count(pos, |c| b"eEinumkKMGTP".contains(c));
        if matches!(b.get(pos), Some(b'+' | b'-')) {
            pos += 1;
        }
        pos += count(pos, u8::is_ascii_digit);
        (pos == b.len()).then_some(Parts {
            negative,
            has_digits: zeros > 0 || !whole.is_empty() || !fraction.is_empty(),
            whole,
            fraction,
            suffix,
        })
    }

    /// Whether apimachinery takes its slow path (arbitrary precision) rather than its int64 one.
    /// The two give the same value, but the slow one reads the number's text and refuses one
    /// without digits, and its exponent arithmetic differs at the int32 edges.
    pub(super) fn slow_path(&self, suffix: Suffix) -> bool {
        let whole_len = self.whole.len().max(1); // no digit before the point counts as "0"
        match suffix {
            Suffix::Decimal(exponent) => {
                whole_len + self.fraction.len() > 18
                    || exponent.wrapping_sub(self.fraction_len()) < -9
            }
            Suffix::Binary(exponent) => {
                // apimachinery's estimate of the digits a binary suffix adds.
                let precision = 15 - whole_len as i64 - i64::from(exponent * 3 / 10) - 1;
                !self.fraction.is_empty() || precision < 0
            }
        }
    }

    /// The powers of 10 and 2 the digits (whole and fraction) are multiplied by. On the int64
    /// path the decimal one is the suffix's exponent less the fraction's length; on the slow path
    /// the fraction's length less the exponent, negated: both in int32 arithmetic that wraps, so
    /// an exponent near -2^31 makes a huge number, not a tiny one.
    pub(super) fn scale(&self, suffix: Suffix, slow: bool) -> (i64, u32) {
        let fraction_len = self.fraction_len();
        match suffix {
            Suffix::Decimal(exponent) if slow => (
                -i64::from(fraction_len.wrapping_add(exponent.wrapping_neg())),
                0,
            ),
            Suffix::Decimal(exponent) => (i64::from(exponent.wrapping_sub(fraction_len)), 0),
            Suffix::Binary(exponent) => (-i64::from(fraction_len), exponent),
        }
    }

    pub(super) fn fraction_len(&self) -> i32 {
        // A request body is far shorter than 2^31 bytes.
        i32::try_from(self.fraction.len()).unwrap_or(i32::MAX)
    }
}

#[derive(Clone, Copy)]
pub(super) enum Suffix {
    /// × 10^n
    Decimal(i32),
    /// × 2^n
    Binary(u32),
}

impl Suffix {
    pub(super) fn interpret(suffix: &[u8]) -> Option<Self> {
        Some(match suffix {
            b"" => Suffix::Decimal(0),
            b"n" => Suffix::Decimal(-9),
            b"u" => Suffix::Decimal(-6),
            b"m" => Suffix::Decimal(-3),
            b"k" => Suffix::Decimal(3),
            b"M" => Suffix::Decimal(6),
            b"G" => Suffix::Decimal(9),
            b"T" => Suffix::Decimal(12),
            b"P" => Suffix::Decimal(15),
            b"E" => Suffix::Decimal(18),
            b"Ki" => Suffix::Binary(10),
            b"Mi" => Suffix::Binary(20),
            b"Gi" => Suffix::Binary(30),
            b"Ti" => Suffix::Binary(40),
            b"Pi" => Suffix::Binary(50),
            b"Ei" => Suffix::Binary(60),
            [b'e' | b'E', exponent @ ..] if !exponent.is_empty() => {
                // apimachinery parses an int64 and keeps its low 32 bits.
                let exponent: i64 = std::str::from_utf8(exponent).ok()?.parse().ok()?;
                Suffix::Decimal(exponent as i32)
            }
            _ => return None,
        })
    }
}

/// ceil(digits × 10^exp10 × 2^exp2) as an i64, None when it does not fit. The digits are ASCII
/// decimal digits, leading zeros allowed; the work is linear in their number whatever exp10.
pub(super) fn milli_magnitude(digits: &[u8], exp10: i64, exp2: u32) -> Option<i64> {
    let first = digits.iter().position(|d| *d != b'0');
    let Some(first) = first else {
        return Some(0);
    };
    let mut digits: Vec<u8> = digits[first..].iter().map(|d| d - b'0').collect();
    if exp2 > 0 {
        multiply(&mut digits, 1u64 << exp2);
    }
    let len = i64::try_from(digits.len()).ok()?;
    if exp10 >= 0 {
        // At least 10^(len - 1 + exp10): more than 19 digits never fits.
        if len + exp10 > 19 {
            return None;
        }
        let value = to_u64(&digits)?.checked_mul(10u64.checked_pow(u32::try_from(exp10).ok()?)?)?;
        return i64::try_from(value).ok();
    }
    // Dividing by 10^-exp10 keeps the leading len + exp10 digits; any other non-zero rounds up.
    let kept = usize::try_from(len + exp10).unwrap_or(0);
    let rest_non_zero = digits[kept..].iter().any(|d| *d != 0);
    let value = to_u64(&digits[..kept])?.checked_add(u64::from(rest_non_zero))?;
    i64::try_from(value).ok()
}

/// Multiplies the decimal digits (most significant first) by `factor`, in place.
pub(super) fn multiply(digits: &mut Vec<u8>, factor: u64) {
    let mut carry: u128 = 0;
    for d in digits.iter_mut().rev() {
        let v = u128::from(*d) * u128::from(factor) + carry;
        *d = (v % 10) as u8;
        carry = v / 10;
    }
    while carry > 0 {
        digits.insert(0, (carry % 10) as u8);
        carry /= 10;
    }
}

/// The digits as a number, None beyond u64.
pub(super) fn to_u64(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |value, d| {
        value.checked_mul(10)?.checked_add(u64::from(*d))
    })
}

/// Formats milli-units for people: cpu-like values as `2` or `1500m`, byte-like values (memory,
/// storage) in the largest binary unit that divides them, everything else as a plain number.
pub fn format_quantity(name: &str, milli: i64) -> String {
    // A flavored queue's resource (`<flavor>:<resource>`) reads as its resource.
    let name = name.split_once(':').map_or(name, |(_, resource)| resource);
    let bytes_like =
        name == "memory" || name.ends_with("storage") || name.starts_with("hugepages-");
    if bytes_like && milli % 1000 == 0 {
        let bytes = milli / 1000;
        for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
            if bytes != 0 && bytes % (1i64 << shift) == 0 {
                return format!("{}{suffix}", bytes >> shift);
            }
        }
        return bytes.to_string();
    }
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// Formats an amount for a message: memory in Gi/Mi with decimals allowed, cpu in cores.
pub fn describe_quantity(name: &str, milli: i64) -> String {
    if name == "memory" {
        let bytes = milli as f64 / 1000.0;
        let gib = bytes / (1u64 << 30) as f64;
        if gib >= 1.0 {
            return format!("{}Gi", trim_float(gib));
        }
        return format!("{}Mi", trim_float(bytes / (1u64 << 20) as f64));
    }
    if milli % 1000 == 0 {
        return (milli / 1000).to_string();
    }
    trim_float(milli as f64 / 1000.0)
}

pub(super) fn trim_float(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
