//! Kubernetes resource quantities (`100m`, `1.5`, `128Mi`, `1G`, `2Ki`, `1e3`), parsed
//! exactly (integer arithmetic, no floats) into the units the scheduler counts in:
//! millicores for cpu, bytes for memory and storage, plain counts for everything else.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The value of a quantity string in thousandths of its unit, rounded up (kube's
/// `MilliValue`). `None` for malformed input or values out of range.
pub fn parse_milli(s: &str) -> Option<i128> {
    let s = s.trim();
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // Mantissa: digits with at most one '.'.
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return None;
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let scale = frac_part.len() as i32;

    // Suffix: binary multiplier, decimal exponent, or e<exponent>.
    let (binary, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        other => {
            let exp = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))?;
            if exp.is_empty() {
                return None;
            }
            let e: i32 = exp.parse().ok()?;
            if !(-40..=40).contains(&e) {
                return None;
            }
            (1, e)
        }
    };
    // value * 1000 = mantissa * binary * 10^(exp10 + 3 - scale)
    let power = exp10 + 3 - scale;
    let numerator = mantissa.checked_mul(binary)?;
    let value = if power >= 0 {
        numerator.checked_mul(10i128.checked_pow(power as u32)?)?
    } else {
        let denominator = 10i128.checked_pow((-power) as u32)?;
        // Round up, as kube does for MilliValue.
        (numerator + denominator - 1) / denominator
    };
    Some(if negative { -value } else { value })
}

/// A quantity in whole units, rounded up (kube's `Value`).
pub fn parse_value(s: &str) -> Option<i128> {
    let milli = parse_milli(s)?;
    Some(if milli >= 0 {
        (milli + 999) / 1000
    } else {
        milli / 1000
    })
}

/// Clamps to i64 (the scheduler's accounting type).
fn clamp(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// The amount of `resource` a quantity stands for, in the scheduler's unit for it:
/// millicores for `cpu`, whole units (bytes, counts) otherwise. Malformed → 0.
pub fn amount(resource: &str, q: &Quantity) -> i64 {
    let parsed = if resource == "cpu" {
        parse_milli(&q.0)
    } else {
        parse_value(&q.0)
    };
    match parsed {
        Some(v) => clamp(v),
        None => {
            tracing::debug!(resource, quantity = %q.0, "ignoring a malformed quantity");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_forms() {
        assert_eq!(parse_milli("100m"), Some(100));
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("0.1"), Some(100));
        assert_eq!(parse_milli(".5"), Some(500));
        assert_eq!(parse_milli("250000n"), Some(1)); // rounds up
        assert_eq!(parse_milli("1u"), Some(1));
        assert_eq!(parse_milli("0"), Some(0));
        assert_eq!(parse_milli("+2"), Some(2000));
        assert_eq!(parse_milli("-1"), Some(-1000));
    }

    #[test]
    fn memory_forms() {
        assert_eq!(parse_value("128Mi"), Some(128 * 1024 * 1024));
        assert_eq!(parse_value("1G"), Some(1_000_000_000));
        assert_eq!(parse_value("2Ki"), Some(2048));
        assert_eq!(parse_value("1.5Gi"), Some(1536 * 1024 * 1024));
        assert_eq!(parse_value("1k"), Some(1000));
        assert_eq!(parse_value("1e3"), Some(1000));
        assert_eq!(parse_value("1E3"), Some(1000));
        assert_eq!(parse_value("1E"), Some(1_000_000_000_000_000_000));
        assert_eq!(parse_value("1Ei"), Some(1 << 60));
        assert_eq!(parse_value("100m"), Some(1)); // 0.1 byte rounds up
        assert_eq!(parse_value("110"), Some(110));
    }

    #[test]
    fn malformed() {
        for bad in [
            "", "abc", "1.2.3", "1Qi", "Mi", ".", "1e", "1ee3", "--1", "1 Mi",
        ] {
            assert_eq!(parse_milli(bad), None, "{bad:?}");
        }
        assert_eq!(amount("memory", &Quantity("bogus".into())), 0);
        assert_eq!(amount("cpu", &Quantity("2".into())), 2000);
        assert_eq!(amount("pods", &Quantity("110".into())), 110);
    }
}
