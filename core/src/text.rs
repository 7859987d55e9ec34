//! How values appear in error messages: one spelling in every binding, and the pieces
//! ([`Text`]) that each host spells its own way (durations, option names).

use std::borrow::Cow;
use std::fmt;

use core::time::Duration;

/// `n` as a message shows it: whole numbers within `i64` as integers (`3`, `-1`), others in their
/// shortest round-trip form (`0.5`, `1e+21`), `NaN`, `Infinity` and `-Infinity` as
/// JavaScript spells them.
///
/// The digits come from zmij (the formatter serde_json uses): the WebAssembly module then
/// carries one float formatter, not also `core::fmt`'s.
pub fn number(n: f64) -> String {
    if n.is_nan() {
        "NaN".to_owned()
    } else if n.is_infinite() {
        if n > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else if n.fract() == 0.0 && n.abs() < 9.2e18 {
        // Within i64: the integer is the number.
        (n as i64).to_string()
    } else {
        zmij::Buffer::new().format_finite(n).to_owned()
    }
}

/// Whose conventions a message is told in: the units of its durations and the spelling
/// of the option names it mentions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// `core::time::Duration`'s `Debug` (`0ns`, `988ms`, `1.5s`); option names as the
    /// core's fields (`retry_base`, `auto_renew=false`).
    Rust,
    /// Seconds, as Python's options take them (`0 s`, `0.988 s`); option names as the
    /// keyword arguments (`retry_base`, `auto_renew=False`).
    Python,
    /// Milliseconds, as JavaScript's options take them (`0 ms`, `988 ms`); option names
    /// as the options object's keys (`retryBaseMs`, `autoRenew: false`).
    Js,
}

/// The core's options whose values are durations: JavaScript takes them in milliseconds,
/// with `Ms` after their names (`ttl` is `ttlMs`).
const DURATION_OPTIONS: [&str; 8] = [
    "ttl",
    "acquire_timeout",
    "retry_base",
    "retry_max",
    "renew_every",
    "clock_margin",
    "replica_timeout",
    "unreachable_every",
];

impl Host {
    /// `option` (the core's name, `retry_base`) as this host's users write it:
    /// `retryBaseMs` in JavaScript, unchanged elsewhere.
    pub fn option_name(self, option: &str) -> Cow<'_, str> {
        let duration = DURATION_OPTIONS.contains(&option);
        if self != Host::Js || (!option.contains('_') && !duration) {
            return Cow::Borrowed(option);
        }
        Cow::Owned(js_name(option, duration))
    }

    /// `d` in this host's unit: `Debug` for Rust; seconds for Python and milliseconds for
    /// JavaScript, as [`number`] says them (exact up to 2^53 ns, about 104 days: further
    /// on, to the precision of the `float` or `number` the host passed).
    pub fn duration(self, d: Duration) -> String {
        let mut out = String::new();
        self.push_duration(&mut out, d);
        out
    }

    fn push_duration(self, out: &mut String, d: Duration) {
        use fmt::Write;
        let nanos = d.as_nanos() as f64;
        let (n, unit) = match self {
            Host::Rust => {
                let _ = write!(out, "{d:?}");
                return;
            }
            Host::Python => (nanos / 1e9, " s"),
            Host::Js => (nanos / 1e6, " ms"),
        };
        out.push_str(&number(n));
        out.push_str(unit);
    }

    /// A boolean option set to `value` as this host's users write it:
    /// `auto_renew=false`, Python `auto_renew=False`, JavaScript `autoRenew: false`.
    pub fn setting(self, option: &str, value: bool) -> String {
        let mut out = self.option_name(option).into_owned();
        out.push_str(match (self, value) {
            (Host::Python, true) => "=True",
            (Host::Python, false) => "=False",
            (Host::Js, true) => ": true",
            (Host::Js, false) => ": false",
            (Host::Rust, true) => "=true",
            (Host::Rust, false) => "=false",
        });
        out
    }
}

/// A core name (`valid_until`, `retry_base`) in JavaScript's spelling: camelCase, with
/// `Ms` after the name of a duration (`validUntilMs`, `retryBaseMs`).
pub fn js_name(name: &str, duration: bool) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    if duration {
        out.push_str("Ms");
    }
    out
}

/// One piece of a [`Text`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Words, the same for every host.
    Words(Cow<'static, str>),
    /// A duration, in the host's unit ([`Host::duration`]).
    Duration(Duration),
    /// An option's name (the core's), in the host's spelling ([`Host::option_name`]).
    Option(&'static str),
    /// A boolean option set to a value: `auto_renew=false`, `auto_renew=False`,
    /// `autoRenew: false`.
    Setting(&'static str, bool),
}

impl From<&'static str> for Piece {
    fn from(words: &'static str) -> Self {
        Piece::Words(Cow::Borrowed(words))
    }
}

impl From<String> for Piece {
    fn from(words: String) -> Self {
        Piece::Words(Cow::Owned(words))
    }
}

impl From<Duration> for Piece {
    fn from(d: Duration) -> Self {
        Piece::Duration(d)
    }
}

/// An option's name as a [`Piece`]: `Opt("retry_base")`.
#[derive(Clone, Copy, Debug)]
pub struct Opt(pub &'static str);

impl From<Opt> for Piece {
    fn from(o: Opt) -> Self {
        Piece::Option(o.0)
    }
}

/// A message whose durations and option names each host says its own way
/// ([`Text::render`]); `Display` renders it for [`Host::Rust`]. Build it with
/// [`crate::text!`]. Serialized as its Rust rendering; read back as plain words.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Text(pub Vec<Piece>);

impl Text {
    /// The message as `host`'s users read it.
    pub fn render(&self, host: Host) -> String {
        let mut out = String::new();
        self.push_to(&mut out, host);
        out
    }

    /// Appends the message as `host`'s users read it to `out`.
    pub fn push_to(&self, out: &mut String, host: Host) {
        for piece in &self.0 {
            match piece {
                Piece::Words(w) => out.push_str(w),
                Piece::Duration(d) => host.push_duration(out, *d),
                Piece::Option(o) => out.push_str(&host.option_name(o)),
                Piece::Setting(o, value) => out.push_str(&host.setting(o, *value)),
            }
        }
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(Host::Rust))
    }
}

impl From<&'static str> for Text {
    fn from(words: &'static str) -> Self {
        Text(vec![Piece::from(words)])
    }
}

impl From<String> for Text {
    fn from(words: String) -> Self {
        Text(vec![Piece::from(words)])
    }
}

impl serde::Serialize for Text {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.render(Host::Rust))
    }
}

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Text::from)
    }
}

/// A [`Text`] from its pieces: words (`&'static str`, `String`), durations (`Duration`),
/// option names (`Opt("retry_base")`) and settings (`Piece::Setting`).
///
/// `text!["must be at least ", Opt("retry_base"), " ", base, ", got ", max]`
#[macro_export]
macro_rules! text {
    ($($piece:expr),* $(,)?) => {
        $crate::text::Text(vec![$($crate::text::Piece::from($piece)),*])
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_a_javascript_user_wrote_them() {
        let cases = [
            (3.0, "3"),
            (-1.0, "-1"),
            (-0.0, "0"),
            (0.5, "0.5"),
            (30_000.25, "30000.25"),
            (1e21, "1e+21"),
            (9_007_199_254_740_993.0, "9007199254740992"),
            (1.5e-7, "1.5e-7"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (n, shown) in cases {
            assert_eq!(number(n), shown, "{n:e}");
        }
    }

    #[test]
    fn durations_are_told_in_each_hosts_unit() {
        let cases = [
            (Duration::ZERO, "0ns", "0 s", "0 ms"),
            (Duration::from_millis(988), "988ms", "0.988 s", "988 ms"),
            (Duration::from_millis(1_500), "1.5s", "1.5 s", "1500 ms"),
            (Duration::from_micros(500), "500µs", "0.0005 s", "0.5 ms"),
            (
                Duration::from_nanos(333_333_333),
                "333.333333ms",
                "0.333333333 s",
                "333.333333 ms",
            ),
            (
                Duration::from_secs(1_000_000_000),
                "1000000000s",
                "1000000000 s",
                "1000000000000 ms",
            ),
        ];
        for (d, rust, python, js) in cases {
            assert_eq!(Host::Rust.duration(d), rust);
            assert_eq!(Host::Python.duration(d), python);
            assert_eq!(Host::Js.duration(d), js);
        }
    }

    #[test]
    fn option_names_are_spelled_the_hosts_way() {
        let said = text![
            "use a longer ",
            Opt("ttl"),
            ", a shorter ",
            Opt("renew_every"),
            ", or ",
            Piece::Setting("auto_renew", false),
            " (",
            Opt("drift_factor"),
            ", ",
            Opt("purpose"),
            ")"
        ];
        assert_eq!(
            said.to_string(),
            "use a longer ttl, a shorter renew_every, or auto_renew=false (drift_factor, purpose)"
        );
        assert_eq!(
            said.render(Host::Python),
            "use a longer ttl, a shorter renew_every, or auto_renew=False (drift_factor, purpose)"
        );
        assert_eq!(
            said.render(Host::Js),
            "use a longer ttlMs, a shorter renewEveryMs, or autoRenew: false (driftFactor, purpose)"
        );
    }
}
