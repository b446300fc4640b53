//! `bench/RESULTS.md` stays a reference: every measured table sits between
//! `<!-- results:NAME begin/end -->` markers with its command, date, load and commit; every
//! NAME is one of `bench/results.sh`'s list (which regenerates it) and every listed NAME has its
//! block; headings name topics, not issues or sessions. A command names no `/tmp` path that
//! nothing in it makes: a tree or an older build comes from `$(bench/osu-trees.sh ...)` or
//! `$(bench/lib-at.sh COMMIT)`, so that a fresh clone can run it. No processes: reads two files.

use std::collections::BTreeSet;
use std::path::Path;

/// What `bench/results.sh` may list as a table's needs.
const NEEDS: &[&str] = &["-", "peers", "rxd", "valgrind", "root", "manual"];

/// One results block: its name and the lines between its markers.
struct Block<'a> {
    name: &'a str,
    lines: Vec<&'a str>,
}

/// The table names of `bench/results.sh`'s list (`"NAME|NEEDS|COMMAND"` lines), with a
/// problem for each malformed entry.
fn listed(script: &str, problems: &mut Vec<String>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut lines = script.lines().skip_while(|l| l.trim() != "tables=(");
    if lines.next().is_none() {
        problems.push("bench/results.sh has no `tables=(` list".into());
        return names;
    }
    for line in lines {
        let line = line.trim();
        if line == ")" {
            return names;
        }
        let entry = line.trim_matches('"');
        let fields: Vec<&str> = entry.splitn(3, '|').collect();
        if fields.len() != 3 || fields[0].is_empty() || fields[2].is_empty() {
            problems.push(format!(
                "bench/results.sh: list entry {line:?} is not \"NAME|NEEDS|COMMAND\""
            ));
            continue;
        }
        for need in fields[1].split(',') {
            let known = NEEDS.contains(&need)
                || need.strip_prefix("netns:").is_some_and(|p| !p.is_empty())
                || need.strip_prefix("dir:").is_some_and(|d| !d.is_empty());
            if !known {
                problems.push(format!(
                    "bench/results.sh: table {} needs {need:?}, which is none of {NEEDS:?}, \
                     netns:PREFIX, dir:PATH",
                    fields[0]
                ));
            }
        }
        for need in fields[1].split(',') {
            if need.starts_with("dir:/tmp/") {
                problems.push(format!(
                    "bench/results.sh: table {} needs {need:?}: a /tmp directory exists on one \
                     machine only; let the command make it (bench/osu-trees.sh, bench/lib-at.sh)",
                    fields[0]
                ));
            }
        }
        // The entry is a double-quoted bash string: `\$` and `\"` stand for `$` and `"`.
        let command = fields[2].replace("\\$", "$").replace("\\\"", "\"");
        for path in unmade_tmp_paths(&command) {
            problems.push(format!(
                "bench/results.sh: table {}'s command names {path}, {UNMADE}",
                fields[0]
            ));
        }
        if !names.insert(fields[0].to_string()) {
            problems.push(format!("bench/results.sh lists {} twice", fields[0]));
        }
    }
    problems.push("bench/results.sh: the `tables=(` list is not closed by `)`".into());
    names
}

/// Why a heading reads as a diary entry rather than a topic, if it does.
fn diary(heading: &str) -> Option<&'static str> {
    let lower = heading.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric() && c != '-' && c != ':')
        .filter(|w| !w.is_empty())
        .collect();
    for pair in words.windows(2) {
        if (pair[0] == "issue" || pair[0] == "issues")
            && pair[1]
                .trim_start_matches('#')
                .starts_with(|c: char| c.is_ascii_digit())
        {
            return Some("an issue number");
        }
    }
    let bytes = heading.as_bytes();
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    for i in 0..bytes.len() {
        let rest = &bytes[i..];
        // 2026-11-29
        if rest.len() >= 10
            && digits(&rest[..4])
            && rest[4] == b'-'
            && digits(&rest[5..7])
            && rest[7] == b'-'
            && digits(&rest[8..10])
        {
            return Some("a date");
        }
        // 08:34
        if rest.len() >= 5 && digits(&rest[..2]) && rest[2] == b':' && digits(&rest[3..5]) {
            return Some("a time of day");
        }
    }
    None
}

/// Everything wrong with RESULTS.md's layout against the script's list; empty when none.
fn problems(results: &str, script: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let names = listed(script, &mut problems);

    let mut blocks: Vec<Block> = Vec::new();
    let mut open: Option<Block> = None;
    let mut fence = false;
    for (i, line) in results.lines().enumerate() {
        let at = i + 1;
        if let Some(name) = marker(line, "begin") {
            if let Some(b) = &open {
                problems.push(format!(
                    "line {at}: block {name} begins inside block {}",
                    b.name
                ));
            }
            open = Some(Block {
                name,
                lines: Vec::new(),
            });
            continue;
        }
        if let Some(name) = marker(line, "end") {
            match open.take() {
                Some(b) if b.name == name => blocks.push(b),
                Some(b) => problems.push(format!(
                    "line {at}: block {} ends with the end marker of {name}",
                    b.name
                )),
                None => problems.push(format!("line {at}: end of block {name}, never begun")),
            }
            continue;
        }
        if let Some(b) = &mut open {
            b.lines.push(line);
        }
        if line.starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence || !line.starts_with('#') {
            continue;
        }
        if let Some(what) = diary(line) {
            problems.push(format!(
                "line {at}: heading {line:?} has {what}: name the topic (the history lives in \
                 the commit messages)"
            ));
        }
    }
    if let Some(b) = open {
        problems.push(format!("block {} is never ended", b.name));
    }

    let mut seen = BTreeSet::new();
    for b in &blocks {
        if !seen.insert(b.name.to_string()) {
            problems.push(format!("block {} appears twice", b.name));
        }
        if !names.contains(b.name) {
            problems.push(format!(
                "block {} is not in bench/results.sh's list, so nothing regenerates it",
                b.name
            ));
        }
        let field = |key: &str| {
            b.lines
                .iter()
                .find_map(|l| l.strip_prefix(&format!("- {key}: ")[..]))
                .map(str::trim)
                .filter(|v| !v.is_empty())
        };
        // Every command line (`- command:`, `- lock-mode command (...):`): its quoted spans.
        for line in &b.lines {
            let Some((key, rest)) = line.strip_prefix("- ").and_then(|l| l.split_once(':')) else {
                continue;
            };
            if !key.contains("command") {
                continue;
            }
            for span in rest.split('`').skip(1).step_by(2) {
                for path in unmade_tmp_paths(span) {
                    problems.push(format!(
                        "block {}: the command names {path}, {UNMADE}",
                        b.name
                    ));
                }
            }
        }
        match field("command") {
            Some(c) if c.contains('`') => {}
            _ => problems.push(format!(
                "block {}: no `- command: ...` line quoting the command in backticks",
                b.name
            )),
        }
        match field("date") {
            Some(d) if has_date(d) => {}
            _ => problems.push(format!(
                "block {}: no `- date: YYYY-MM-DD ...` line",
                b.name
            )),
        }
        if field("load").is_none() {
            problems.push(format!("block {}: no `- load: ...` line", b.name));
        }
        match field("commit") {
            Some(c) if has_hash(c) => {}
            _ => problems.push(format!(
                "block {}: no `- commit: ...` line naming a commit (7 or more hex digits)",
                b.name
            )),
        }
        let table = b
            .lines
            .iter()
            .any(|l| l.starts_with("```") || l.starts_with('|'));
        if !table {
            problems.push(format!(
                "block {}: no table (a code block or a Markdown table)",
                b.name
            ));
        }
    }
    for n in &names {
        if !seen.contains(n.as_str()) {
            problems.push(format!(
                "bench/results.sh lists {n}, which has no block in bench/RESULTS.md"
            ));
        }
    }
    problems
}

/// Why an unmade /tmp path is refused, and what to do instead.
const UNMADE: &str = "which nothing in the command makes (it exists on one machine only): \
    name what makes it, `$(bench/osu-trees.sh osu|peers|osc|mt)` for an OSU tree, \
    `$(bench/lib-at.sh COMMIT)` for an older build's library, or write there as an output";

/// Scripts that make the directory named by one of their positional arguments (1-based): the
/// OSU drivers' OUT, bench/osu-trees.sh's DIR. A compiler's `-o PATH` makes PATH too.
const MAKERS: &[(&str, usize)] = &[
    ("bench/osu-peers.sh", 2),
    ("bench/osu-coll-peers.sh", 2),
    ("bench/osu-overlap.sh", 2),
    ("bench/osu-coll-nodes.sh", 3),
    ("bench/osu-trees.sh", 2),
];

/// The shell words of `cmd` (blanks split them outside quotes and `$( )`; `|`, `||`, `&&` and
/// `;` are words of their own), and the text inside every `$( )`, nested ones included.
fn shell_words(cmd: &str) -> (Vec<String>, Vec<String>) {
    let (mut words, mut inner, mut word) = (Vec::new(), Vec::new(), String::new());
    let (mut quote, mut depth, mut start) = (None::<char>, 0usize, Vec::new());
    let chars: Vec<char> = cmd.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '$') if chars.get(i + 1) == Some(&'(') => {
                depth += 1;
                start.push(i + 2);
                word.push_str("$(");
                i += 2;
                continue;
            }
            (None, ')') if depth > 0 => {
                depth -= 1;
                let from = start.pop().unwrap_or(i);
                inner.push(chars[from..i].iter().collect());
            }
            (None, ' ' | '\t' | '|' | ';' | '&') if depth == 0 => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                if c != ' ' && c != '\t' {
                    // `2>&1` stays one word; `|`, `||`, `&&` and `;` end a command.
                    if c == '&' && words.last().is_some_and(|w| w.ends_with('>')) {
                        let last = words.pop().unwrap_or_default();
                        word = format!("{last}&");
                    } else {
                        words.push(c.to_string());
                    }
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        word.push(c);
        i += 1;
    }
    if !word.is_empty() {
        words.push(word);
    }
    (words, inner)
}

/// The /tmp paths `cmd` makes: the OUT/DIR argument of a script of [`MAKERS`], a compiler's
/// `-o PATH`, in the command or inside any of its `$( )`.
fn made_paths(cmd: &str, made: &mut Vec<String>) {
    let (words, inner) = shell_words(cmd);
    let (mut target, mut position, mut after_o) = (0usize, 0usize, false);
    for w in &words {
        let w = w.trim_matches(|c| c == '"' || c == '\'');
        if after_o {
            made.push(w.to_string());
        }
        after_o = w == "-o";
        if ["|", ";", "&"].contains(&w) {
            target = 0;
        } else if let Some((_, at)) = MAKERS
            .iter()
            .find(|(s, _)| w == *s || w.ends_with(&format!("/{s}")))
        {
            (target, position) = (*at, 0);
        } else if target > 0 && !w.starts_with('-') && !w.contains('>') && !w.contains('=') {
            position += 1;
            if position == target {
                made.push(w.to_string());
            }
        }
    }
    for text in inner {
        made_paths(&text, made);
    }
}

/// The /tmp paths named in `cmd` that nothing in it makes (see [`made_paths`]).
fn unmade_tmp_paths(cmd: &str) -> Vec<String> {
    let mut made = Vec::new();
    made_paths(cmd, &mut made);
    let path_char = |c: char| c.is_ascii_alphanumeric() || "._-/+".contains(c);
    let mut unmade: Vec<String> = Vec::new();
    for (at, _) in cmd.match_indices("/tmp/") {
        if cmd[..at].chars().next_back().is_some_and(path_char) {
            continue; // e.g. /var/tmp/...
        }
        let len = cmd[at..].find(|c| !path_char(c)).unwrap_or(cmd.len() - at);
        let path = cmd[at..at + len].trim_end_matches(['/', '.']).to_string();
        let is_made = made
            .iter()
            .any(|m| path == *m || path.starts_with(&format!("{m}/")));
        if !is_made && !unmade.contains(&path) {
            unmade.push(path);
        }
    }
    unmade
}

/// The NAME of a `<!-- results:NAME begin -->` (or end) line.
fn marker<'a>(line: &'a str, which: &str) -> Option<&'a str> {
    let rest = line.trim().strip_prefix("<!-- results:")?;
    let name = rest.strip_suffix(&format!(" {which} -->")[..])?;
    (!name.is_empty() && !name.contains(' ')).then_some(name)
}

fn has_date(s: &str) -> bool {
    s.as_bytes().windows(10).any(|w| {
        w[..4].iter().all(u8::is_ascii_digit)
            && w[4] == b'-'
            && w[5..7].iter().all(u8::is_ascii_digit)
            && w[7] == b'-'
            && w[8..].iter().all(u8::is_ascii_digit)
    })
}

fn has_hash(s: &str) -> bool {
    s.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| {
        w.len() >= 7
            && w.chars().all(|c| c.is_ascii_hexdigit())
            && w.chars().any(|c| c.is_ascii_digit())
    })
}

#[test]
fn results_md_is_a_reference_regenerated_by_results_sh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let results = std::fs::read_to_string(root.join("bench/RESULTS.md")).unwrap();
    let script = std::fs::read_to_string(root.join("bench/results.sh")).unwrap();
    let found = problems(&results, &script);
    assert!(
        found.is_empty(),
        "bench/RESULTS.md:\n  {}",
        found.join("\n  ")
    );
}

const SCRIPT: &str =
    "x\ntables=(\n  \"lat|peers|rmca-bench latency\"\n  \"mem|-|rmca-bench allconn\"\n)\n";

fn block(name: &str, meta: &str) -> String {
    format!("<!-- results:{name} begin -->\n{meta}\n```\n# t\n```\n<!-- results:{name} end -->\n")
}

const META: &str = "- command: `rmca-bench latency`\n- date: 2026-11-29 10:58 UTC\n\
                    - load: 1.0, 1.0, 1.0 before; 1.1, 1.0, 1.0 after\n- commit: c0ea37f\n";

#[test]
fn a_well_formed_file_passes() {
    let md = format!(
        "# r\n## Topic\n{}{}",
        block("lat", META),
        block("mem", META)
    );
    assert_eq!(problems(&md, SCRIPT), Vec::<String>::new());
}

#[test]
fn each_missing_field_is_named() {
    for (field, meta) in [
        (
            "command",
            META.replace("- command: `rmca-bench latency`\n", ""),
        ),
        ("date", META.replace("2026-11-29 10:58 UTC", "today")),
        (
            "load",
            META.replace("- load: 1.0, 1.0, 1.0 before; 1.1, 1.0, 1.0 after\n", ""),
        ),
        ("commit", META.replace("c0ea37f", "the one then")),
    ] {
        let md = format!("## Topic\n{}{}", block("lat", &meta), block("mem", META));
        let found = problems(&md, SCRIPT);
        assert!(
            found.len() == 1 && found[0].contains(&format!("- {field}: ")),
            "{field}: {found:?}"
        );
    }
}

#[test]
fn names_must_match_the_list_both_ways() {
    let md = format!("## Topic\n{}{}", block("lat", META), block("other", META));
    let found = problems(&md, SCRIPT);
    assert!(
        found.iter().any(|p| p.contains("block other is not in")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("lists mem, which has no block")),
        "{found:?}"
    );
}

#[test]
fn diary_headings_are_refused() {
    for heading in [
        "## Latency (issue 16)",
        "## Issues 7 and 8: memory",
        "### Must-show, 2026-11-28",
        "## Quiet machine sweeps (18:54 UTC)",
    ] {
        let md = format!("{heading}\n{}{}", block("lat", META), block("mem", META));
        assert_eq!(problems(&md, SCRIPT).len(), 1, "{heading}");
    }
    // Comment lines inside code blocks are not headings.
    let md = format!(
        "## T\n```\n# run of 2026-11-29 08:34\n```\n{}{}",
        block("lat", META),
        block("mem", META)
    );
    assert_eq!(problems(&md, SCRIPT), Vec::<String>::new());
}

#[test]
fn unbalanced_markers_and_bad_list_entries_are_named() {
    let md = format!("<!-- results:lat begin -->\n{META}{}", block("mem", META));
    assert!(problems(&md, SCRIPT)
        .iter()
        .any(|p| p.contains("begins inside block lat")));
    let script = "tables=(\n  \"lat|gpu|x\"\n  \"mem\"\n)\n";
    let found = problems("", script);
    assert!(
        found.iter().any(|p| p.contains("needs \"gpu\"")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("is not \"NAME|NEEDS|COMMAND\"")),
        "{found:?}"
    );
}

#[test]
fn tmp_paths_need_a_script_that_makes_them() {
    let md = |cmd: &str| {
        let meta = META.replace("`rmca-bench latency`", cmd);
        format!("## Topic\n{}{}", block("lat", &meta), block("mem", META))
    };
    // An older build or an OSU tree that only one machine's /tmp held: refused, each named.
    let found = problems(
        &md("`RMCA2_LIB=/tmp/old-lib bench/osu-peers.sh /tmp/osu /tmp/out 3` (wrote /tmp/x)"),
        SCRIPT,
    );
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("names /tmp/old-lib,"), "{found:?}");
    assert!(found[1].contains("names /tmp/osu,"), "{found:?}");
    assert!(
        problems(&md("`x` and `LD_LIBRARY_PATH=/tmp/b rmca-run`"), SCRIPT)
            .iter()
            .any(|p| p.contains("/tmp/b"))
    );
    // Made by the command itself (outputs, compiler outputs, the tree scripts): accepted;
    // prose outside the backticks is history, not a command.
    for ok in [
        "`RMCA2_LIB=$(bench/lib-at.sh abc1234) bench/osu-coll-peers.sh $(bench/osu-trees.sh osu) /tmp/out 3 2>&1 | sed -n '/^# osu_/,$p'`",
        "`mpicc x.c -o /tmp/first && rmca-run -n 2 /tmp/first` (the run kept /tmp/y)",
        "`B=$(bench/osu-trees.sh osc /tmp/o) osc_osu /tmp/o/src 1`",
        "`bench/osu-coll-nodes.sh $(bench/osu-trees.sh osu) n0,n1 /tmp/chn-osu 1`",
    ] {
        assert_eq!(problems(&md(ok), SCRIPT), Vec::<String>::new(), "{ok}");
    }
    // A path that a maker names but in another position than its output is still refused.
    assert_eq!(
        problems(&md("`bench/osu-peers.sh /tmp/src /tmp/out`"), SCRIPT).len(),
        1
    );
    // The list of bench/results.sh: its commands and its dir: needs alike.
    let script = "tables=(\n  \"lat|peers|RMCA_LIB=\\$(bench/lib-at.sh abc1234) x /tmp/a\"\n  \"mem|dir:/tmp/b|y\"\n)\n";
    let md = format!("## T\n{}{}", block("lat", META), block("mem", META));
    let found = problems(&md, script);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("lat's command names /tmp/a"), "{found:?}");
    assert!(found[1].contains("needs \"dir:/tmp/b\""), "{found:?}");
}
