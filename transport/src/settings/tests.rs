use super::*;
use std::path::{Path, PathBuf};

#[test]
fn names_are_unique_and_prefixed() {
    for (i, s) in SETTINGS.iter().enumerate() {
        assert!(s.name.starts_with("RDCOLL_"), "{}", s.name);
        assert!(
            SETTINGS[..i].iter().all(|t| t.name != s.name),
            "{} declared twice",
            s.name
        );
        assert!(!s.doc.is_empty() && !s.default.is_empty(), "{}", s.name);
    }
}

#[test]
fn every_variable_refuses_a_bad_value_by_name() {
    for s in SETTINGS {
        let Some(bad) = s.kind.refused_example() else {
            continue;
        };
        let expected = s.kind.parse(bad).expect_err(s.name);
        let e = SettingError {
            name: s.name,
            value: bad.into(),
            expected,
        };
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("{}=\"{bad}\": expected ", s.name)),
            "{text}"
        );
    }
}

#[test]
fn kinds_parse_what_they_document() {
    assert_eq!(Kind::Size.parse("64K"), Ok(Value::Size(64 << 10)));
    assert_eq!(Kind::Size.parse("8192"), Ok(Value::Size(8192)));
    assert!(Kind::Size.parse("99999999999999999999G").is_err());
    assert_eq!(Kind::Rate.parse("50M"), Ok(Value::Number(50 << 20)));
    assert_eq!(Kind::Flag.parse("0"), Ok(Value::Flag(false)));
    assert!(Kind::Flag.parse("2").is_err());
    assert_eq!(Kind::Number.parse("17"), Ok(Value::Number(17)));
    let degree = Kind::NumberOrWords(&["model"]);
    assert_eq!(degree.parse("model"), Ok(Value::Word("model")));
    assert_eq!(degree.parse("3"), Ok(Value::Number(3)));
    assert_eq!(
        Kind::Words(&["a", "b"]).parse("c"),
        Err("one of a, b".to_string())
    );
}

#[test]
fn blank_means_the_default() {
    assert_eq!(normalized(None), None);
    assert_eq!(normalized(Some("".into())), None);
    assert_eq!(normalized(Some("  \t".into())), None);
    assert_eq!(normalized(Some(" 4K ".into())), Some("4K".into()));
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The text between `<!-- NAME` and `<!-- /NAME -->` in `doc` (the opening marker's line
/// excluded).
fn between(doc: &str, name: &str) -> Option<(usize, usize)> {
    let open = doc.find(&format!("<!-- {name}"))?;
    let start = open + doc[open..].find('\n')? + 1;
    let end = start + doc[start..].find(&format!("<!-- /{name} -->"))?;
    Some((start, end))
}

#[test]
fn readme_tables_are_the_declarations() {
    let path = repo_root().join("README.md");
    let mut doc = std::fs::read_to_string(&path).unwrap();
    let tables = [
        (
            "settings",
            markdown(&[Level::Launch, Level::User, Level::Tuning]),
        ),
        ("testing-settings", markdown(&[Level::Testing])),
    ];
    let bless = std::env::var_os("RDCOLL_BLESS").is_some();
    for (marker, table) in tables {
        let (start, end) = between(&doc, marker)
            .unwrap_or_else(|| panic!("README.md has no <!-- {marker} --> section"));
        if bless {
            doc.replace_range(start..end, &table);
        } else {
            assert_eq!(
                doc[start..end],
                table,
                "README.md's {marker} table differs from transport/src/settings/table.rs; \
                 RDCOLL_BLESS=1 cargo test -p rdcoll-transport --lib settings rewrites it"
            );
        }
    }
    if bless {
        std::fs::write(&path, doc).unwrap();
    }
}

/// Variables named in the library's sources that are not the library's settings: the test
/// suite's and the benchmarks' own.
const NOT_SETTINGS: &[&str] = &[
    "RDCOLL_BLESS",
    "RDCOLL_TEST_",
    "RDCOLL_BENCH_",
    "RDCOLL_FUZZ_INPUTS",
];

#[test]
fn every_variable_read_is_declared() {
    let mut missing = Vec::new();
    for dir in [
        "src",
        "transport/src",
        "offload/src",
        "collectives/src",
        "matching/src",
        "ffi/src",
    ] {
        scan(&repo_root().join(dir), &mut missing);
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "read but not declared: {missing:?}");
}

fn scan(dir: &Path, missing: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            scan(&p, missing);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            for (i, _) in text.match_indices("\"RDCOLL_") {
                let name: String = text[i + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                let prefix_only = name == "RDCOLL_";
                if !prefix_only
                    && setting(&name).is_none()
                    && !NOT_SETTINGS.iter().any(|n| name.starts_with(n))
                {
                    missing.push(name);
                }
            }
        }
    }
}
