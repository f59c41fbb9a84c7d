//! What a setting's value must look like, and parsing it.

/// The kind of value a variable takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bytes: `8192`, or with a `K`, `M` or `G` suffix (powers of 1024).
    Size,
    /// A whole number.
    Number,
    /// Bytes per second, with the suffixes of a size.
    Rate,
    /// `0` (off) or `1` (on).
    Flag,
    /// One of these words.
    Words(&'static [&'static str]),
    /// A whole number or one of these words.
    NumberOrWords(&'static [&'static str]),
    /// Any text (a path, an address, a filter).
    Text,
}

/// A parsed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// From [`Kind::Size`].
    Size(usize),
    /// From [`Kind::Number`], [`Kind::Rate`] or [`Kind::NumberOrWords`].
    Number(u64),
    /// From [`Kind::Flag`].
    Flag(bool),
    /// From [`Kind::Words`] or [`Kind::NumberOrWords`].
    Word(&'static str),
    /// From [`Kind::Text`].
    Text(String),
}

impl Kind {
    /// `v` (already trimmed, not empty) as this kind, or what was expected instead.
    pub fn parse(&self, v: &str) -> Result<Value, String> {
        let parsed = match self {
            Kind::Size => parse_size(v).map(Value::Size),
            Kind::Number => v.parse().ok().map(Value::Number),
            Kind::Rate => parse_size(v).map(|b| Value::Number(b as u64)),
            Kind::Flag => match v {
                "0" => Some(Value::Flag(false)),
                "1" => Some(Value::Flag(true)),
                _ => None,
            },
            Kind::Words(words) => word(words, v).map(Value::Word),
            Kind::NumberOrWords(words) => word(words, v)
                .map(Value::Word)
                .or_else(|| v.parse().ok().map(Value::Number)),
            Kind::Text => Some(Value::Text(v.to_string())),
        };
        parsed.ok_or_else(|| self.expected())
    }

    /// What a value of this kind looks like, in words.
    pub fn expected(&self) -> String {
        match self {
            Kind::Size => "a size such as 8192 or 64K".into(),
            Kind::Number => "a whole number".into(),
            Kind::Rate => "bytes per second such as 50M".into(),
            Kind::Flag => "0 or 1".into(),
            Kind::Words(words) => format!("one of {}", words.join(", ")),
            Kind::NumberOrWords(words) => format!("a whole number or {}", words.join(", ")),
            Kind::Text => "text".into(),
        }
    }

    /// A value this kind refuses (for the tests of every variable's error), if any.
    pub fn refused_example(&self) -> Option<&'static str> {
        match self {
            Kind::Size | Kind::Rate => Some("12Q"),
            Kind::Number => Some("-3"),
            Kind::Flag => Some("yes"),
            Kind::Words(_) | Kind::NumberOrWords(_) => Some("nonsense"),
            Kind::Text => None,
        }
    }
}

fn word(words: &'static [&'static str], v: &str) -> Option<&'static str> {
    words.iter().copied().find(|w| *w == v)
}

/// Parses `123`, `64K`, `1M`, `2G` (case-insensitive, powers of 1024); `None` for anything
/// else or a value that overflows.
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, shift) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 10),
        (i, 'm' | 'M') => (&s[..i], 20),
        (i, 'g' | 'G') => (&s[..i], 30),
        _ => (s, 0),
    };
    let n: usize = digits.parse().ok()?;
    n.checked_mul(1usize << shift)
}
