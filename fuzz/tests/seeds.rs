//! Runs every checked-in seed through its target on the stable toolchain, so a broken
//! seed or a target that rejects its own seeds shows up in `cargo test` without a fuzzing
//! run. The inputs in `regressions/` show known engine bugs: they fail with
//! `LATEBIND_FUZZ_STRICT=1` (see `engine::strict`) and must pass without it, which checks
//! that the driver's allowance for each known bug covers its input.

use std::fs;
use std::path::Path;

fn each_seed(target: &str, run: fn(&[u8])) {
    each_input("seeds", target, run);
}

fn each_input(kind: &str, target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(kind)
        .join(target);
    let mut n = 0;
    let mut entries: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let data = fs::read(&path).unwrap();
        eprintln!("{}", path.display());
        run(&data);
        n += 1;
    }
    assert!(n > 0, "no {kind} for {target}");
}

#[test]
fn wire_parse_seeds_pass() {
    each_seed("wire_parse", latebind_fuzz::wire_parse::run);
}

#[test]
fn engine_datagrams_seeds_pass() {
    each_seed("engine_datagrams", latebind_fuzz::engine::run_datagrams);
}

#[test]
fn engine_tun_seeds_pass() {
    each_seed("engine_tun", latebind_fuzz::engine::run_tun);
}

#[test]
fn crypto_open_seeds_pass() {
    each_seed("crypto_open", latebind_fuzz::crypto::run);
}

#[test]
fn engine_regressions_pass_unless_strict() {
    if latebind_fuzz::engine::strict() {
        return;
    }
    each_input(
        "regressions",
        "engine_datagrams",
        latebind_fuzz::engine::run_datagrams,
    );
    each_input("regressions", "engine_tun", latebind_fuzz::engine::run_tun);
}
