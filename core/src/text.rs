//! How values appear in error messages: one spelling in every binding.

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

#[cfg(test)]
mod tests {
    use super::number;

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
}
