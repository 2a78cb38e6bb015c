//! No crate of the workspace has a circle of imports between its files,
//! and the check would see one.

use std::path::{Path, PathBuf};

use payonce_tests::imports::{circles, folder_circles};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every crate's `src`: each under `crates/`, and this one.
fn sources() -> Vec<PathBuf> {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    sources.push(root().join("tests/src"));
    sources.sort();
    sources
}

/// The fixture crate `name`'s circles, as file names relative to its `src`.
fn fixture_circles(name: &str) -> Vec<Vec<String>> {
    let src = root().join("tests/fixtures/imports").join(name).join("src");
    circles(&src)
        .unwrap()
        .into_iter()
        .map(|circle| {
            circle
                .iter()
                .map(|file| file.strip_prefix(&src).unwrap().display().to_string())
                .collect()
        })
        .collect()
}

// Guards against a circle of imports coming back into any crate: two
// files that each need the other are one concept split badly, or two
// concepts tangled.
#[test]
fn no_crate_has_a_circle_of_imports_between_its_files() {
    let sources = sources();
    assert!(sources.len() >= 8, "{sources:?}");
    for src in sources {
        let found = circles(&src).unwrap();
        assert!(found.is_empty(), "circles of imports in {src:?}: {found:?}");
    }
}

// Guards against a check that cannot fail: a circle made on purpose, its
// arrows written as a plain path after a string holding "//", a group
// within a group, and a serde attribute's string, is found whole.
#[test]
fn a_circle_made_on_purpose_is_found() {
    assert_eq!(
        fixture_circles("circle"),
        vec![vec![
            "a.rs".to_owned(),
            "b.rs".to_owned(),
            "c/mod.rs".to_owned()
        ]]
    );
}

// Guards against seeing circles that are not there: parents and children
// naming each other, and paths in comments (a comment after a quote
// character included), are no arrows.
#[test]
fn parents_children_and_comments_make_no_circle() {
    assert_eq!(fixture_circles("acyclic"), Vec::<Vec<String>>::new());
}

// Guards against a wing straddling floors: two sibling folders whose files
// each use the other's, which no circle of files shows.
#[test]
fn no_crate_has_a_circle_between_sibling_folders() {
    for src in sources() {
        let found = folder_circles(&src).unwrap();
        assert!(found.is_empty(), "circles of folders in {src:?}: {found:?}");
    }
}

// Guards against a folder check that cannot fail, or sees what is not
// there: a circle of folders made on purpose is found, with no circle of
// files in it, a test file's arrow left out and the folder both use
// outside it; the other fixtures have none.
#[test]
fn a_circle_of_folders_made_on_purpose_is_found_and_only_it() {
    let src = root().join("tests/fixtures/imports/folders/src");
    let found: Vec<Vec<String>> = folder_circles(&src)
        .unwrap()
        .into_iter()
        .map(|circle| {
            circle
                .iter()
                .map(|folder| folder.strip_prefix(&src).unwrap().display().to_string())
                .collect()
        })
        .collect();
    assert_eq!(found, vec![vec!["state".to_owned(), "wing".to_owned()]]);
    assert_eq!(fixture_circles("folders"), Vec::<Vec<String>>::new());
    for name in ["acyclic", "circle"] {
        let src = root().join("tests/fixtures/imports").join(name).join("src");
        assert!(folder_circles(&src).unwrap().is_empty(), "{name}");
    }
}
