//! Circles of imports between the files of one crate: `a.rs` names an item
//! of `b.rs` (`crate::b::X`, `super::b::X`, in a `use` or inline) and `b.rs`,
//! through any number of files, names one of `a.rs`. A parent module and its
//! own children may name each other freely; only files that are not each
//! other's ancestors count. Comments are left out; paths in string
//! literals count, since serde's `deserialize_with = "crate::..."` is a use.
//!
//! This reads text, not the compiler's resolution: a path through a
//! re-export or a `#[path]` module is not seen. It errs toward seeing an
//! arrow that is not there, never toward a silent circle of plain `use`s.
//!
//! [`folder_circles`] reads the same arrows a floor higher: a folder is a
//! room, and two sibling folders whose files each use the other's are a
//! circle even when no two files are (a wing straddling floors). Test
//! files (`tests.rs`, `tests_*.rs`) are left out there: a test may reach
//! anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path inside its crate: `["api", "extract"]`; the root is empty.
type ModulePath = Vec<String>;

/// Most source files read from one crate.
pub const CRATE_FILES_MAX: usize = 4096;

/// Every circle among the files of the crate whose sources are in `src`,
/// each listed as its files' paths, sorted. Binaries (`src/bin/`) are left
/// out: each is a crate of its own.
pub fn circles(src: &Path) -> std::io::Result<Vec<Vec<PathBuf>>> {
    let modules = modules(src)?;
    let mut graph: BTreeMap<&Path, BTreeSet<&Path>> = BTreeMap::new();
    for (here, file) in &modules {
        let text = std::fs::read_to_string(file)?;
        for there in targets(&without_comments(&text), here, &modules) {
            let related = here.starts_with(&there) || there.starts_with(here);
            if !related {
                graph.entry(file).or_default().insert(&modules[&there]);
            }
        }
    }
    Ok(strongly_connected(&graph)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| component.into_iter().map(Path::to_path_buf).collect())
        .collect())
}

/// Every circle among the sibling folders of the crate whose sources are
/// in `src`: folder A's files use folder B's and B's use A's, directly or
/// through other folders, each listed as its folders' paths, sorted.
pub fn folder_circles(src: &Path) -> std::io::Result<Vec<Vec<PathBuf>>> {
    let modules = modules(src)?;
    let folders: BTreeMap<&ModulePath, PathBuf> = modules
        .iter()
        .filter(|(_, file)| file.file_name().is_some_and(|name| name == "mod.rs"))
        .filter_map(|(path, file)| Some((path, file.parent()?.to_path_buf())))
        .collect();
    let mut graph: BTreeMap<&Path, BTreeSet<&Path>> = BTreeMap::new();
    for (here, file) in &modules {
        if is_test_file(file.strip_prefix(src).unwrap_or(file)) {
            continue;
        }
        let text = std::fs::read_to_string(file)?;
        for there in targets(&without_comments(&text), here, &modules) {
            if here.starts_with(&there) || there.starts_with(here) {
                continue;
            }
            let common = here.iter().zip(&there).take_while(|(a, b)| a == b).count();
            let (from, to) = (&here[..=common], &there[..=common]);
            if let (Some(from), Some(to)) = (folder_of(&folders, from), folder_of(&folders, to)) {
                graph.entry(from).or_default().insert(to);
            }
        }
    }
    Ok(strongly_connected(&graph)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| component.into_iter().map(Path::to_path_buf).collect())
        .collect())
}

/// The directory of folder module `path`, if it is a folder (`mod.rs`).
fn folder_of<'a>(folders: &'a BTreeMap<&ModulePath, PathBuf>, path: &[String]) -> Option<&'a Path> {
    folders.get(&path.to_vec()).map(PathBuf::as_path)
}

/// Whether `file`, a path inside a crate's `src`, holds tests only:
/// `tests.rs`, `tests_*.rs`, or a file under a `tests/` folder.
fn is_test_file(file: &Path) -> bool {
    let name = file
        .file_name()
        .map(|name| name.to_string_lossy().into_owned());
    name.is_some_and(|name| name == "tests.rs" || name.starts_with("tests_"))
        || file.components().any(|part| part.as_os_str() == "tests")
}

/// Module path to file, for every `.rs` file under `src` but `src/bin/`.
fn modules(src: &Path) -> std::io::Result<BTreeMap<ModulePath, PathBuf>> {
    let mut found = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                if !(dir == src && path.file_name().is_some_and(|name| name == "bin")) {
                    pending.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            if found.len() == CRATE_FILES_MAX {
                return Err(std::io::Error::other(format!(
                    "{} holds more than {CRATE_FILES_MAX} source files",
                    src.display()
                )));
            }
            found.insert(module_path(src, &path), path);
        }
    }
    Ok(found)
}

/// `src/api/mod.rs` and `src/api.rs` are `api`; `src/lib.rs` and
/// `src/main.rs` the root.
fn module_path(src: &Path, file: &Path) -> ModulePath {
    let relative = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: ModulePath = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        parts.clear();
    }
    parts
}

/// `text` with its line and block comments blanked out. String and
/// character literals are kept (and read, so a `//` inside one is no
/// comment).
pub fn without_comments(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut kept = String::with_capacity(text.len());
    let mut at = 0;
    while at < chars.len() {
        let rest = &chars[at..];
        let skip = match rest {
            ['/', '/', ..] => rest.iter().position(|&c| c == '\n').unwrap_or(rest.len()),
            ['/', '*', ..] => block_comment_len(rest),
            ['"', ..] => keep(&mut kept, &rest[..string_len(rest, 0)]),
            ['r', '#' | '"', ..] if at == 0 || !is_ident(chars[at - 1]) => {
                keep(&mut kept, &rest[..raw_string_len(rest)])
            }
            ['\'', ..] => keep(&mut kept, &rest[..char_literal_len(rest)]),
            [c, ..] => keep(&mut kept, &[*c]),
            [] => 1,
        };
        if matches!(rest, ['/', '/' | '*', ..]) {
            kept.push(' ');
        }
        at += skip.max(1);
    }
    kept
}

fn keep(kept: &mut String, chars: &[char]) -> usize {
    kept.extend(chars);
    chars.len()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Length of the block comment `rest` starts with; they nest.
fn block_comment_len(rest: &[char]) -> usize {
    let (mut depth, mut at) = (0usize, 0);
    while at < rest.len() {
        match &rest[at..] {
            ['/', '*', ..] => (depth, at) = (depth + 1, at + 2),
            ['*', '/', ..] => {
                (depth, at) = (depth - 1, at + 2);
                if depth == 0 {
                    return at;
                }
            }
            _ => at += 1,
        }
    }
    rest.len()
}

/// Length of the string literal that starts at `rest[open]` (a `"`).
fn string_len(rest: &[char], open: usize) -> usize {
    let mut at = open + 1;
    while at < rest.len() {
        match rest[at] {
            '\\' => at += 2,
            '"' => return at + 1,
            _ => at += 1,
        }
    }
    rest.len()
}

/// Length of the raw string literal `rest` starts with (`r"..."`,
/// `r#"..."#`), or 1 when the `r` starts an identifier.
fn raw_string_len(rest: &[char]) -> usize {
    let hashes = rest[1..].iter().take_while(|&&c| c == '#').count();
    if rest.get(1 + hashes) != Some(&'"') {
        return 1;
    }
    let body = 2 + hashes;
    let closing: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    (body..rest.len())
        .find(|&at| rest[at..].starts_with(&closing))
        .map_or(rest.len(), |at| at + closing.len())
}

/// Length of the character literal `rest` starts with (`'x'`, `'\n'`,
/// `'\u{1b}'`), or 1 for a lifetime's quote.
fn char_literal_len(rest: &[char]) -> usize {
    match rest {
        ['\'', '\\', _, ..] => rest[3..]
            .iter()
            .position(|&c| c == '\'')
            .map_or(rest.len(), |end| end + 4),
        ['\'', _, '\'', ..] => 3,
        _ => 1,
    }
}

/// The modules of `modules` that the code of module `here` names.
fn targets(
    code: &str,
    here: &ModulePath,
    modules: &BTreeMap<ModulePath, PathBuf>,
) -> BTreeSet<ModulePath> {
    let mut named = BTreeSet::new();
    for (anchor, parts) in paths(code) {
        let mut base: ModulePath = match anchor.as_str() {
            "crate" => Vec::new(),
            _ => here.clone(),
        };
        let mut parts = parts.as_slice();
        while let [first, rest @ ..] = parts
            && first == "super"
        {
            base.pop();
            parts = rest;
        }
        if anchor == "super" {
            base.pop();
        }
        base.extend(parts.iter().filter(|part| *part != "self").cloned());
        if let Some(cut) = (1..=base.len())
            .rev()
            .find(|&cut| modules.contains_key(&base[..cut]))
        {
            named.insert(base[..cut].to_vec());
        }
    }
    named
}

/// Every path anchored at `crate`, `super` or `self` in `code`, as its
/// anchor and the names after it; each item of a group (`crate::a::{b, c::D}`)
/// is a path of its own.
fn paths(code: &str) -> Vec<(String, Vec<String>)> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let starts_word = at == 0 || !is_ident(chars[at - 1]);
        let word: String = chars[at..].iter().take_while(|&&c| is_ident(c)).collect();
        let anchored = matches!(word.as_str(), "crate" | "super" | "self");
        if starts_word && anchored && chars[at + word.len()..].starts_with(&[':', ':']) {
            let (tails, len) = path_tails(&chars[at + word.len()..]);
            found.extend(tails.into_iter().map(|tail| (word.clone(), tail)));
            at += word.len() + len;
        } else {
            at += word.len().max(1);
        }
    }
    found
}

/// The names of the path `rest` starts with (`::a::b`, or a group
/// `::a::{b, c::d}`, one path per item), and how many characters it took.
fn path_tails(rest: &[char]) -> (Vec<Vec<String>>, usize) {
    let mut names = Vec::new();
    let mut at = 0;
    while rest[at..].starts_with(&[':', ':']) {
        at += 2;
        at += rest[at..].iter().take_while(|c| c.is_whitespace()).count();
        if rest.get(at) == Some(&'{') {
            let inner = group_len(&rest[at..]);
            let items = split_items(&rest[at + 1..at + inner.saturating_sub(1).max(1)]);
            let tails = items
                .into_iter()
                .map(|item| [names.clone(), item].concat())
                .collect();
            return (tails, at + inner);
        }
        let name: String = rest[at..].iter().take_while(|&&c| is_ident(c)).collect();
        if name.is_empty() {
            break;
        }
        at += name.len();
        names.push(name);
    }
    (vec![names], at)
}

/// Length of the `{...}` group `rest` starts with, braces included.
fn group_len(rest: &[char]) -> usize {
    let mut depth = 0usize;
    for (at, &c) in rest.iter().enumerate() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return at + 1;
                }
            }
            _ => {}
        }
    }
    rest.len()
}

/// A group's items, split at its top-level commas, each as the names it
/// starts with (`c::{d, e}` is `c`; `f as g` is `f`).
fn split_items(inner: &[char]) -> Vec<Vec<String>> {
    let text: String = inner.iter().collect();
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (at, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(text[start..at].to_owned());
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(text[start..].to_owned());
    items
        .iter()
        .map(|item| {
            let item = item.split(" as ").next().unwrap_or_default();
            let item = item.split('{').next().unwrap_or_default();
            item.split("::")
                .map(str::trim)
                .filter(|name| !name.is_empty() && name.chars().all(is_ident))
                .map(str::to_owned)
                .collect::<Vec<String>>()
        })
        .filter(|names| !names.is_empty())
        .collect()
}

/// The strongly connected components of `graph` (Tarjan's algorithm,
/// iterative, so a deep crate cannot overflow the stack).
fn strongly_connected<'a>(graph: &BTreeMap<&'a Path, BTreeSet<&'a Path>>) -> Vec<Vec<&'a Path>> {
    let nodes: BTreeSet<&Path> = graph
        .iter()
        .flat_map(|(from, to)| std::iter::once(*from).chain(to.iter().copied()))
        .collect();
    let mut tarjan = Tarjan::default();
    for node in nodes {
        if !tarjan.index.contains_key(node) {
            tarjan.visit(node, graph);
        }
    }
    tarjan.found
}

#[derive(Default)]
struct Tarjan<'a> {
    index: BTreeMap<&'a Path, usize>,
    low: BTreeMap<&'a Path, usize>,
    stack: Vec<&'a Path>,
    on_stack: BTreeSet<&'a Path>,
    found: Vec<Vec<&'a Path>>,
}

impl<'a> Tarjan<'a> {
    fn visit(&mut self, root: &'a Path, graph: &BTreeMap<&'a Path, BTreeSet<&'a Path>>) {
        let empty = BTreeSet::new();
        let edges = |node: &Path| graph.get(node).unwrap_or(&empty).iter().copied().collect();
        self.open(root);
        let mut calls: Vec<(&'a Path, Vec<&'a Path>)> = vec![(root, edges(root))];
        while let Some((node, next)) = calls.last_mut() {
            let node = *node;
            if let Some(child) = next.pop() {
                if !self.index.contains_key(child) {
                    self.open(child);
                    calls.push((child, edges(child)));
                } else if self.on_stack.contains(child) {
                    self.lower(node, self.index[child]);
                }
                continue;
            }
            calls.pop();
            if let Some((parent, _)) = calls.last() {
                self.lower(parent, self.low[node]);
            }
            if self.low[node] == self.index[node] {
                self.close(node);
            }
        }
    }

    fn open(&mut self, node: &'a Path) {
        let n = self.index.len();
        self.index.insert(node, n);
        self.low.insert(node, n);
        self.stack.push(node);
        self.on_stack.insert(node);
    }

    fn lower(&mut self, node: &'a Path, to: usize) {
        if let Some(low) = self.low.get_mut(node) {
            *low = (*low).min(to);
        }
    }

    fn close(&mut self, node: &'a Path) {
        let mut component = Vec::new();
        while let Some(member) = self.stack.pop() {
            self.on_stack.remove(member);
            component.push(member);
            if member == node {
                break;
            }
        }
        component.sort();
        self.found.push(component);
    }
}
