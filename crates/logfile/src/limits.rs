//! How big a log file may grow and how many rotated files are kept, and the one syntax every
//! setting of them is written in: ipamd's environment, the entrypoint's environment and the
//! plugin's conflist keys all parse through [`parse_size`] and [`parse_max_files`].

use thiserror::Error;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The Go CNI's size limit: lumberjack's `MaxSize: 100`, in its megabytes of 2^20 bytes.
pub const DEFAULT_MAX_SIZE: u64 = 100 * MIB;
/// The Go CNI's number of rotated files kept (lumberjack's `MaxBackups: 5`).
pub const DEFAULT_MAX_FILES: u32 = 5;

/// A limit setting that cannot be used; the text says the rule, the caller names the setting.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum LimitError {
    /// Not a size at all.
    #[error("expected a number of bytes, optionally followed by Ki, Mi or Gi (e.g. 100Mi)")]
    SizeSyntax,
    /// A size of nothing: every record would need a file of its own.
    #[error("must be at least 1 byte")]
    ZeroSize,
    /// More bytes than 64 bits hold.
    #[error("is too large")]
    SizeTooLarge,
    /// Not a count of files, or none.
    #[error("expected a whole number of rotated files to keep, 1 or more")]
    MaxFiles,
}

/// When a log file rotates and how many rotated files stay: both at least 1, by construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    max_size: u64,
    max_files: u32,
}

impl Rotation {
    /// A file rotates before a record would take it beyond `max_size` bytes; `max_files`
    /// rotated files are kept (`<log>.1`, the newest, to `<log>.<max_files>`).
    pub fn new(max_size: u64, max_files: u32) -> Result<Rotation, LimitError> {
        if max_size == 0 {
            return Err(LimitError::ZeroSize);
        }
        if max_files == 0 {
            return Err(LimitError::MaxFiles);
        }
        Ok(Rotation {
            max_size,
            max_files,
        })
    }

    /// The size limit in bytes.
    pub fn max_size(&self) -> u64 {
        self.max_size
    }

    /// The number of rotated files kept.
    pub fn max_files(&self) -> u32 {
        self.max_files
    }
}

impl Default for Rotation {
    /// The Go CNI's: 100 MiB, 5 rotated files.
    fn default() -> Self {
        Rotation {
            max_size: DEFAULT_MAX_SIZE,
            max_files: DEFAULT_MAX_FILES,
        }
    }
}

/// Reads a size: a whole number of bytes, or one followed by `Ki`, `Mi` or `Gi` (powers of
/// 1024, as Kubernetes writes quantities), surrounding blanks ignored. Kubernetes' decimal
/// suffixes (`K`, `M`, `G`) are refused rather than guessed at: `100M` is 100 000 000 bytes to
/// Kubernetes and 100 MiB to lumberjack's users.
pub fn parse_size(text: &str) -> Result<u64, LimitError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let unit = match unit {
        "" => 1,
        "Ki" => KIB,
        "Mi" => MIB,
        "Gi" => GIB,
        _ => return Err(LimitError::SizeSyntax),
    };
    if digits.is_empty() {
        return Err(LimitError::SizeSyntax);
    }
    // Only digits are left, so the one way to fail is overflow.
    let count: u64 = digits.parse().map_err(|_| LimitError::SizeTooLarge)?;
    match count.checked_mul(unit) {
        None => Err(LimitError::SizeTooLarge),
        Some(0) => Err(LimitError::ZeroSize),
        Some(bytes) => Ok(bytes),
    }
}

/// Reads a number of rotated files to keep: a whole number, at least 1 (0 would keep no old
/// file, which is truncation, not rotation).
pub fn parse_max_files(text: &str) -> Result<u32, LimitError> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(LimitError::MaxFiles);
    }
    match text.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(LimitError::MaxFiles),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn sizes_in_bytes_and_binary_units() {
        for (text, want) in [
            ("1", 1),
            ("4096", 4096),
            (" 512Ki ", 512 * 1024),
            ("100Mi", 100 * 1024 * 1024),
            ("2Gi", 2 << 30),
            ("0001Ki", 1024),
        ] {
            assert_eq!(parse_size(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn bad_sizes_say_why() {
        for (text, want) in [
            ("", LimitError::SizeSyntax),
            ("Mi", LimitError::SizeSyntax),
            ("100M", LimitError::SizeSyntax),
            ("100mi", LimitError::SizeSyntax),
            ("100 Mi", LimitError::SizeSyntax),
            ("-1", LimitError::SizeSyntax),
            ("1.5Mi", LimitError::SizeSyntax),
            ("100MB", LimitError::SizeSyntax),
            ("0", LimitError::ZeroSize),
            ("0Gi", LimitError::ZeroSize),
            ("18446744073709551616", LimitError::SizeTooLarge),
            ("17179869184Gi", LimitError::SizeTooLarge),
        ] {
            assert_eq!(parse_size(text), Err(want), "{text:?}");
        }
        assert!(LimitError::SizeSyntax.to_string().contains("100Mi"));
    }

    #[test]
    fn max_files_is_a_count_of_at_least_one() {
        assert_eq!(parse_max_files("5"), Ok(5));
        assert_eq!(parse_max_files(" 1 "), Ok(1));
        for bad in ["0", "", "-1", "+3", "two", "4294967296", "1.0"] {
            assert_eq!(parse_max_files(bad), Err(LimitError::MaxFiles), "{bad:?}");
        }
    }

    #[test]
    fn the_default_is_the_go_cnis() {
        let r = Rotation::default();
        assert_eq!((r.max_size(), r.max_files()), (104_857_600, 5));
        assert_eq!(Rotation::new(0, 5), Err(LimitError::ZeroSize));
        assert_eq!(Rotation::new(1, 0), Err(LimitError::MaxFiles));
    }

    const UNITS: [(&str, u64); 4] = [("", 1), ("Ki", KIB), ("Mi", MIB), ("Gi", GIB)];

    proptest! {
        #[test]
        fn a_number_with_a_unit_is_that_many_units(n in 0u64..=u64::MAX, unit in 0usize..4) {
            let (suffix, size) = UNITS[unit];
            let parsed = parse_size(&format!("{n}{suffix}"));
            match n.checked_mul(size) {
                None => prop_assert_eq!(parsed, Err(LimitError::SizeTooLarge)),
                Some(0) => prop_assert_eq!(parsed, Err(LimitError::ZeroSize)),
                Some(bytes) => prop_assert_eq!(parsed, Ok(bytes)),
            }
        }

        #[test]
        fn anything_accepted_is_digits_and_a_unit(text in "\\PC{0,12}") {
            if parse_size(&text).is_ok() {
                let t = text.trim();
                let body = t
                    .strip_suffix("Ki")
                    .or_else(|| t.strip_suffix("Mi"))
                    .or_else(|| t.strip_suffix("Gi"))
                    .unwrap_or(t);
                prop_assert!(!body.is_empty() && body.bytes().all(|b| b.is_ascii_digit()), "{text:?}");
            }
        }
    }
}
