//! Replays every fuzz target's committed corpus (`fuzz/corpus/<target>/`) and every input
//! that once crashed it (`fuzz/regressions/<target>/`) through the same entry points the
//! fuzzer calls (`k3rs::fuzzing`), on the stable toolchain. A target without a corpus fails
//! the test: the fuzzer would start from nothing.

use std::path::Path;

fn inputs(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn every_target_replays_its_corpus_and_past_crashes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut replayed = 0;
    for target in k3rs::fuzzing::TARGETS {
        let corpus = inputs(&root.join("corpus").join(target));
        assert!(
            !corpus.is_empty(),
            "fuzz/corpus/{target}/ is empty: commit seed inputs for it"
        );
        let regressions = inputs(&root.join("regressions").join(target));
        for path in corpus.iter().chain(&regressions) {
            let data = std::fs::read(path).expect("read input");
            let outcome = std::panic::catch_unwind(|| k3rs::fuzzing::run(target, &data));
            assert!(outcome.is_ok(), "{target} panicked on {}", path.display());
            replayed += 1;
        }
    }
    let declared = std::fs::read_to_string(root.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for target in k3rs::fuzzing::TARGETS {
        assert!(
            declared.contains(&format!("name = \"{target}\"")),
            "{target} is not a bin of fuzz/Cargo.toml"
        );
    }
    println!("replayed {replayed} inputs");
}
