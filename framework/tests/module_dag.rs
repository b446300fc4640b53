//! The framework's modules form a DAG (see the layering in `src/lib.rs`): a module never uses,
//! directly or through others, a module that uses it. Checked from the source: every `crate::x`
//! path outside comments is an edge from the module that writes it to `x`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `module → modules it names`, from `src/<module>.rs` and `src/<module>/**.rs`.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src").flatten() {
            let p = e.path();
            if p.is_dir() {
                files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in all {
        let rel = f.strip_prefix(&src).unwrap();
        let module = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let targets = graph.entry(module.clone()).or_default();
        for line in text.lines() {
            // Comments (doc links included) are not imports.
            let code = line.split("//").next().unwrap_or("");
            for (i, _) in code.match_indices("crate::") {
                // `$crate::` in a macro names the crate root as seen by the macro's user.
                if code[..i].ends_with('$') {
                    continue;
                }
                let rest = &code[i + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // Only modules (lower case); `crate::SomeMacro` or `crate::{..}` are not edges.
                if !name.is_empty()
                    && name.chars().next().unwrap().is_ascii_lowercase()
                    && (src.join(format!("{name}.rs")).exists()
                        || src.join(&name).join("mod.rs").exists())
                    && name != module
                {
                    targets.insert(name);
                }
            }
        }
    }
    graph
}

/// A cycle of `graph`, if any, as the list of modules along it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(n) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|p| p == n).unwrap();
                let mut cycle = path[start..].to_vec();
                cycle.push(n.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(n.to_owned(), Mark::Open);
        path.push(n.to_owned());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(n.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, graph, &mut marks, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn modules_form_a_dag() {
    let graph = edges();
    for (m, to) in &graph {
        eprintln!(
            "{m} → {}",
            to.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    assert!(graph.contains_key("component") && graph.contains_key("btl"));
    if let Some(cycle) = find_cycle(&graph) {
        panic!("framework modules import each other: {}", cycle.join(" → "));
    }
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn framework_does_not_depend_on_rte() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    assert!(
        !manifest.contains("rmca-rte"),
        "the plugin-facing framework crate must not depend on rmca-rte (runtime init is rmca-runtime's)"
    );
}
