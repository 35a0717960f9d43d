//! Timestamps as Go's `time.Time` marshals them (RFC 3339 with the fraction's trailing zeros
//! dropped, UTC), so tools written against the Go CNI parse ours.

use std::time::{Duration, SystemTime};

use pool::Timestamp;

/// Go's zero `time.Time`, shown for "never".
pub const ZERO: &str = "0001-01-01T00:00:00Z";

/// The last instant RFC 3339's four-digit years can show (9999-12-31T23:59:59.999Z).
const MAX_MILLIS: u64 = 253_402_300_799_999;

/// `t` as Go's RFC3339Nano in UTC, e.g. `2026-11-22T10:00:00.12Z`.
pub fn format(t: Timestamp) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(t.millis().min(MAX_MILLIS));
    let text = humantime::format_rfc3339_millis(at).to_string();
    // "....ss.mmmZ": drop the fraction's trailing zeros, and the dot with them if none is left.
    match text.strip_suffix('Z').and_then(|s| s.rsplit_once('.')) {
        Some((whole, fraction)) => {
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() {
                format!("{whole}Z")
            } else {
                format!("{whole}.{fraction}Z")
            }
        }
        None => text,
    }
}

/// `t` as Go shows it, [`ZERO`] for `None`.
pub fn format_opt(t: Option<Timestamp>) -> String {
    t.map_or_else(|| ZERO.to_string(), format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_lose_trailing_zeros_like_go() {
        // 2026-11-22T10:00:00Z
        let base = 1_795_341_600_000;
        assert_eq!(format(Timestamp(base)), "2026-11-22T10:00:00Z");
        assert_eq!(format(Timestamp(base + 120)), "2026-11-22T10:00:00.12Z");
        assert_eq!(format(Timestamp(base + 7)), "2026-11-22T10:00:00.007Z");
        assert_eq!(format(Timestamp(0)), "1970-01-01T00:00:00Z");
        assert_eq!(format(Timestamp(u64::MAX)), "9999-12-31T23:59:59.999Z");
        assert_eq!(format_opt(None), ZERO);
    }
}
