//! Every `RDCOLL_*` environment variable the library reads, declared once ([`SETTINGS`]) with
//! its kind, default, level and meaning, and read through one parser with one rule: a variable
//! that is unset, empty or only blanks takes its default; any other value must parse as its
//! kind, or reading it is an error naming the variable and what it expects.
//!
//! The README's tables and `rdcoll-bench info` are generated from the declarations (a test
//! fails when the README differs: `RDCOLL_BLESS=1 cargo test -p rdcoll-transport --lib
//! settings` rewrites it).

mod kind;
mod table;

pub use kind::{parse_size, Kind, Value};
pub use table::SETTINGS;

/// Who sets a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The launcher (`rdcoll-run`, or the user under another launcher).
    Launch,
    /// A user choosing what the job does (transport, timeouts, logging).
    User,
    /// Performance tuning; the defaults suit most hosts.
    Tuning,
    /// Fault injection for the test suite; never for production.
    Testing,
}

impl Level {
    /// Its name in the README and in `rdcoll-bench info`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Launch => "launch",
            Level::User => "user",
            Level::Tuning => "tuning",
            Level::Testing => "testing",
        }
    }
}

/// One environment variable.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Its name (`RDCOLL_...`).
    pub name: &'static str,
    /// What its value must be.
    pub kind: Kind,
    /// What applies when it is unset, in words.
    pub default: &'static str,
    /// Who sets it.
    pub level: Level,
    /// What it does.
    pub doc: &'static str,
}

/// A value that does not parse as its variable's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    /// The variable.
    pub name: &'static str,
    /// The value given.
    pub value: String,
    /// What the variable takes, in words.
    pub expected: String,
}

impl std::fmt::Display for SettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={:?}: expected {}",
            self.name, self.value, self.expected
        )
    }
}

impl std::error::Error for SettingError {}

impl From<SettingError> for crate::TransportError {
    fn from(e: SettingError) -> Self {
        crate::TransportError::InvalidArgument(e.to_string())
    }
}

/// The declaration of `name`. Reading a variable that is not declared is a bug in rdcoll
/// (the test `every_variable_read_is_declared` looks for them).
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The value of `name` as given, or `None` where the rule says "default" (unset, empty or
/// blank).
pub fn given(name: &str) -> Option<String> {
    normalized(std::env::var(name).ok())
}

/// The rule: a value that is absent, empty or blank is no value; others lose their blanks.
fn normalized(raw: Option<String>) -> Option<String> {
    raw.map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// `name`'s value parsed as its declared kind; `None` for the default.
pub fn read(name: &'static str) -> Result<Option<Value>, SettingError> {
    let Some(v) = given(name) else {
        return Ok(None);
    };
    let Some(s) = setting(name) else {
        debug_assert!(
            false,
            "{name} is read but not declared in settings::SETTINGS"
        );
        return Ok(Some(Value::Text(v)));
    };
    s.kind.parse(&v).map(Some).map_err(|expected| SettingError {
        name: s.name,
        value: v,
        expected,
    })
}

/// `name`'s value picked out by `pick` (the variant of its declared kind); a variable read as
/// another kind than it is declared is an error saying so (a bug in rdcoll), never a silent
/// default.
fn typed<T>(
    name: &'static str,
    wanted: &str,
    pick: impl FnOnce(Value) -> Option<T>,
) -> Result<Option<T>, SettingError> {
    let Some(v) = read(name)? else {
        return Ok(None);
    };
    let shown = format!("{v:?}");
    pick(v).map(Some).ok_or_else(|| SettingError {
        name,
        value: shown,
        expected: format!("{wanted} (rdcoll reads it as one, but declares it otherwise: a bug)"),
    })
}

/// `name` (a size: bytes, or with a `K`, `M` or `G` suffix).
pub fn size(name: &'static str) -> Result<Option<usize>, SettingError> {
    typed(name, "a size", |v| match v {
        Value::Size(b) => Some(b),
        _ => None,
    })
}

/// `name` (a whole number; rates too, in bytes per second).
pub fn number(name: &'static str) -> Result<Option<u64>, SettingError> {
    typed(name, "a number", |v| match v {
        Value::Number(n) => Some(n),
        _ => None,
    })
}

/// `name` (`0` or `1`).
pub fn flag(name: &'static str) -> Result<Option<bool>, SettingError> {
    typed(name, "0 or 1", |v| match v {
        Value::Flag(b) => Some(b),
        _ => None,
    })
}

/// `name` (one of its declared words).
pub fn word(name: &'static str) -> Result<Option<&'static str>, SettingError> {
    typed(name, "a word", |v| match v {
        Value::Word(w) => Some(w),
        _ => None,
    })
}

/// `name` (free text, a path or an address).
pub fn text(name: &'static str) -> Result<Option<String>, SettingError> {
    typed(name, "text", |v| match v {
        Value::Text(t) => Some(t),
        _ => None,
    })
}

/// The number `name` holds, else the first of `launchers` (other launchers' own variables,
/// not rdcoll's settings: they are skipped when they hold no number) that holds one.
pub fn number_or_launchers(
    name: &'static str,
    launchers: &[&str],
) -> Result<Option<u64>, SettingError> {
    if let Some(n) = number(name)? {
        return Ok(Some(n));
    }
    Ok(launchers
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok()))
}

/// The README's table of the settings at `levels`, one row per variable.
pub fn markdown(levels: &[Level]) -> String {
    let mut out = String::from("| variable | level | default | meaning |\n|---|---|---|---|\n");
    for s in SETTINGS.iter().filter(|s| levels.contains(&s.level)) {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            s.name,
            s.level.name(),
            s.default,
            s.doc
        ));
    }
    out
}

#[cfg(test)]
mod tests;
