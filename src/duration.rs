//! Durations and rates as sluice's flags and specs write them ("500ms", "5m", "20"): shared by the
//! CLI (`sluice serve`) and the controllers (a Task's `timeout`, a TaskCluster's `idleTimeout`),
//! so that neither imports the other.

use std::time::Duration;

/// The longest duration sluice accepts (ten years): longer ones are refused rather than kept,
/// since a deadline computed from one (`Instant + Duration`) would overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(3650 * 86400);

/// Parses "500ms", "20s", "5m", "1h", "365d" (a bare number is seconds), up to [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 500ms, 20s, 5m, 1h or 365d"))?;
    let seconds_per_unit = match unit {
        "ms" => return bounded(text, Duration::from_millis(n)),
        "s" | "" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use ms, s, m, h or d)"
            ));
        }
    };
    match n.checked_mul(seconds_per_unit) {
        Some(seconds) => bounded(text, Duration::from_secs(seconds)),
        None => bounded(text, Duration::MAX),
    }
}

fn bounded(text: &str, d: Duration) -> Result<Duration, String> {
    if d > MAX_DURATION {
        return Err(format!(
            "{text:?} is longer than sluice accepts (3650d, ten years)"
        ));
    }
    Ok(d)
}

/// A rate per second: a finite number, 0 or more.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate >= 0.0 => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a rate per second: give a number, 0 or more (0: no limit)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, parse_rate};
    use std::time::Duration;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("20"), Ok(20.0));
        assert_eq!(parse_rate("0.5"), Ok(0.5));
        assert_eq!(parse_rate("0"), Ok(0.0));
        assert!(parse_rate("-1").is_err());
        assert!(parse_rate("inf").is_err());
        assert!(parse_rate("NaN").is_err());
        assert!(parse_rate("fast").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("20ms"), Ok(Duration::from_millis(20)));
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("365d"), Ok(Duration::from_secs(365 * 86400)));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("5y").is_err());
    }

    #[test]
    fn absurd_durations_are_refused_not_wrapped() {
        assert_eq!(parse_duration("3650d"), Ok(super::MAX_DURATION));
        for absurd in [
            "3651d",
            "99999999999999d",
            "18446744073709551615s",
            "99999999999999999999",
        ] {
            let refused = parse_duration(absurd).expect_err(absurd);
            assert!(
                refused.contains(absurd) || refused.contains("not a duration"),
                "{refused}"
            );
        }
    }
}
