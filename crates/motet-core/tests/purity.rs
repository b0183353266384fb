//! Layers are pure state machines: no clocks, sockets, threads, randomness or environment
//! (thesis §2.1.8; STYLE principle 1). This test reads every layer's source and fails on any
//! import that would let a layer reach outside its events. (clippy.toml bans the same types.)

#[test]
fn layers_do_not_touch_the_outside_world() {
    let forbidden = [
        "std::time",
        "std::net",
        "std::thread",
        "std::env",
        "std::fs",
        "std::io",
        "std::process",
        "rand",
        "tokio",
        "mio",
        "HashMap",
        "HashSet",
        "SystemTime",
        "Mutex",
        "RefCell",
        "static mut",
        "thread_local",
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/layers");
    let mut checked = 0;
    // A layer's own folder (its tests, as `mnak/tests.rs`) is read as well.
    let mut dirs = vec![dir];
    let mut files = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path)
            } else {
                files.push(path)
            }
        }
    }
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        for word in forbidden {
            assert!(!source.contains(word), "{} mentions `{word}`", path.display());
        }
        checked += 1;
    }
    assert!(checked >= 10, "found only {checked} layer files");
}
