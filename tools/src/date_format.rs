//! `--date-format` of the perf tools: the part of Java's `SimpleDateFormat` patterns 0.7's
//! tools are given (`yyyy-MM-dd HH:mm:ss:SSS` by default), formatted in UTC. Letters: `y`
//! (`yy`: two digits), `M` (`MMM`/`MMMM`: the month's name), `d`, `H`, `h`, `k`, `K`, `m`, `s`,
//! `S` (milliseconds), `E` (the day's name), `a` (AM/PM), `z`/`Z` (the zone: UTC); text in
//! single quotes (`''` for a quote); every other non-letter as it is. Any other letter is
//! refused when the pattern is read, naming it, rather than printed wrong.

use std::time::{SystemTime, UNIX_EPOCH};

/// 0.7's perf tools' default pattern.
pub const PERF_DEFAULT: &str = "yyyy-MM-dd HH:mm:ss:SSS";

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];

/// A pattern Tributary does not format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DateFormatError {
    /// A letter outside those formatted.
    #[error("--date-format {pattern}: pattern letter '{letter}' is not supported (supported: y M d H h k K m s S E a z Z, and 'quoted text')")]
    Letter {
        /// The pattern.
        pattern: String,
        /// The letter.
        letter: char,
    },
    /// A quote that is never closed (Java refuses it too).
    #[error("--date-format {0}: a quote is not closed")]
    UnclosedQuote(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Field(char, usize),
    Text(String),
}

/// A parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DateFormat(Vec<Part>);

impl DateFormat {
    /// Reads `pattern`.
    pub fn parse(pattern: &str) -> Result<Self, DateFormatError> {
        let mut parts = Vec::new();
        let mut chars = pattern.chars().peekable();
        let mut text = String::new();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                    text.push('\'');
                    continue;
                }
                // Quoted text up to the closing quote ('' inside is a quote).
                let mut closed = false;
                while let Some(q) = chars.next() {
                    if q == '\'' {
                        if chars.peek() == Some(&'\'') {
                            chars.next();
                            text.push('\'');
                            continue;
                        }
                        closed = true;
                        break;
                    }
                    text.push(q);
                }
                if !closed {
                    return Err(DateFormatError::UnclosedQuote(pattern.to_string()));
                }
                continue;
            }
            if !c.is_ascii_alphabetic() {
                text.push(c);
                continue;
            }
            if !"yMdHhkKmsSEazZ".contains(c) {
                return Err(DateFormatError::Letter {
                    pattern: pattern.to_string(),
                    letter: c,
                });
            }
            let mut count = 1;
            while chars.peek() == Some(&c) {
                chars.next();
                count += 1;
            }
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text)));
            }
            parts.push(Part::Field(c, count));
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(DateFormat(parts))
    }

    /// 0.7's default, `yyyy-MM-dd HH:mm:ss:SSS`.
    pub fn perf_default() -> Self {
        DateFormat(vec![
            Part::Field('y', 4),
            Part::Text("-".into()),
            Part::Field('M', 2),
            Part::Text("-".into()),
            Part::Field('d', 2),
            Part::Text(" ".into()),
            Part::Field('H', 2),
            Part::Text(":".into()),
            Part::Field('m', 2),
            Part::Text(":".into()),
            Part::Field('s', 2),
            Part::Text(":".into()),
            Part::Field('S', 3),
        ])
    }

    /// `at` in UTC.
    pub fn format(&self, at: SystemTime) -> String {
        let ms = at
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
        let (year, month, day) = civil(days);
        let hour = ms_of_day / 3_600_000;
        let mut out = String::new();
        for part in &self.0 {
            let (letter, count) = match part {
                Part::Text(text) => {
                    out.push_str(text);
                    continue;
                }
                Part::Field(letter, count) => (*letter, *count),
            };
            let number = |value: i64| format!("{value:0count$}");
            let field = match letter {
                'y' if count == 2 => format!("{:02}", year.rem_euclid(100)),
                'y' => number(year),
                'M' if count >= 4 => MONTHS[(month - 1) as usize].to_string(),
                'M' if count == 3 => MONTHS[(month - 1) as usize][..3].to_string(),
                'M' => number(month),
                'd' => number(day),
                'H' => number(hour),
                'k' => number(if hour == 0 { 24 } else { hour }),
                'K' => number(hour % 12),
                'h' => number(if hour % 12 == 0 { 12 } else { hour % 12 }),
                'm' => number(ms_of_day / 60_000 % 60),
                's' => number(ms_of_day / 1000 % 60),
                'S' => number(ms_of_day % 1000),
                'E' => {
                    let name = DAYS[days.rem_euclid(7) as usize];
                    if count >= 4 { name } else { &name[..3] }.to_string()
                }
                'a' => if hour < 12 { "AM" } else { "PM" }.to_string(),
                'z' => "UTC".to_string(),
                _ => "+0000".to_string(),
            };
            out.push_str(&field);
        }
        out
    }
}

/// (year, month 1-12, day 1-31) of `days` since 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn the_default_is_0_7s_and_parses_to_itself() {
        assert_eq!(
            DateFormat::parse(PERF_DEFAULT).unwrap(),
            DateFormat::perf_default()
        );
        assert_eq!(
            DateFormat::perf_default().format(at(1_325_376_000_123)),
            "2012-01-01 00:00:00:123"
        );
    }

    #[test]
    fn formats_what_java_would_for_the_patterns_scripts_use() {
        // 2012-11-28 08:41:58.123 UTC, a Wednesday.
        let t = at(1_354_092_118_123);
        let cases = [
            ("yyyy-MM-dd HH:mm:ss.SSS", "2012-11-28 08:41:58.123"),
            ("yy/M/d h:mm a", "12/11/28 8:41 AM"),
            (
                "EEE, d MMM yyyy HH:mm:ss Z",
                "Wed, 28 Nov 2012 08:41:58 +0000",
            ),
            ("EEEE MMMM", "Wednesday November"),
            ("'at' HH 'o''clock'", "at 08 o'clock"),
            ("k K z", "8 8 UTC"),
        ];
        for (pattern, expected) in cases {
            assert_eq!(
                DateFormat::parse(pattern).unwrap().format(t),
                expected,
                "{pattern}"
            );
        }
    }

    #[test]
    fn an_unsupported_letter_is_refused_naming_it() {
        let error = DateFormat::parse("yyyy-ww").unwrap_err();
        assert!(matches!(error, DateFormatError::Letter { letter: 'w', .. }));
        assert!(error.to_string().contains("'w' is not supported"));
        assert_eq!(
            DateFormat::parse("HH 'at").unwrap_err(),
            DateFormatError::UnclosedQuote("HH 'at".into())
        );
    }
}
