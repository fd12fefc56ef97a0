//! The `latebind` binary as a user runs it.

use std::process::Command;

fn latebind() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_latebind"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    c
}

#[test]
fn sim_prints_a_table_and_json() {
    let out = latebind()
        .args(["sim", "scenarios/urgent.toml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("urgent") && text.contains("mode late"),
        "{text}"
    );
    let out = latebind()
        .args(["sim", "scenarios/urgent.toml", "--mode", "early", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "early");
    assert_eq!(v["scenario"], "urgent");
    for key in ["flows", "links", "totals"] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let f = &v["flows"][0];
    for key in [
        "sent",
        "delivered",
        "lost",
        "duplicates",
        "latency_ms",
        "max_gap_ms",
        "goodput_mbps",
    ] {
        assert!(f.get(key).is_some(), "missing flows[].{key}");
    }
}

#[test]
fn compare_puts_variants_side_by_side() {
    let out = latebind()
        .args(["sim", "scenarios/handoff.toml", "--compare"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for label in ["late, budget 2", "early, driver 50", "early, driver 5"] {
        assert!(text.contains(label), "{text}");
    }
}

#[test]
fn bad_scenario_value_names_key_value_and_expectation() {
    let dir = std::env::temp_dir().join(format!("latebind-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[scenario]\nname = \"x\"\nduration_s = 1.0\n[[links]]\nname = \"a\"\nrate_mbps = 10.0\nloss = 2.0\n",
    )
    .unwrap();
    let out = latebind().arg("sim").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("links[0].loss = 2: expected a probability between 0 and 1"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_mode_and_bad_override_are_clear() {
    let out = latebind()
        .args(["sim", "scenarios/urgent.toml", "--mode", "mptcp"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("expected late or early"), "{err}");
    let out = latebind()
        .args([
            "sim",
            "scenarios/urgent.toml",
            "--set",
            "late.budget_packets",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("expected KEY=VALUE"), "{err}");
}

#[test]
fn missing_scenario_file_names_the_path() {
    // A scenario, and likewise a daemon's configuration file.
    for (args, path) in [
        (&["sim", "scenarios/nope.toml"][..], "scenarios/nope.toml"),
        (&["client", "--config", "nope.toml"], "nope.toml"),
    ] {
        let out = latebind().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(path), "{err}");
        // The reason once, not repeated by the error's chain.
        assert_eq!(err.matches("No such file").count(), 1, "{err}");
    }
}

#[test]
fn cuts_are_in_the_json_the_table_and_the_comparison() {
    let out = latebind()
        .args(["sim", "scenarios/handoff.toml", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &v["cuts"][0];
    assert_eq!(
        (&c["link"], &c["at_s"], &c["flow"]),
        (&"wifi1".into(), &6.0.into(), &"bulk".into())
    );
    assert!(c["stall_ms"].as_f64().is_some_and(|s| s > 0.0), "{c}");
    assert!(c["data_again_ms"].is_number(), "{c}");
    // A TCP flow has no loss figure per cut.
    assert!(c["lost"].is_null(), "{c}");
    let out = latebind()
        .args(["sim", "scenarios/handoff.toml"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("data again ms"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("wifi1") && l.contains("6.000") && l.contains("bulk")),
        "{text}"
    );
    let out = latebind()
        .args(["sim", "scenarios/handoff.toml", "--compare"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for row in [
        "cut wifi1 6.000 s, bulk: stall ms",
        "cut wifi1 6.000 s, bulk: data again ms",
    ] {
        assert!(text.contains(row), "{text}");
    }
    assert!(!text.contains("6.000 s, bulk: lost"), "{text}");
}

/// A reader that stops early (`latebind sim ... | head`) ends the output quietly: no
/// panic, and the exit status of a run that went well.
#[test]
fn output_to_a_reader_that_went_away_is_no_panic() {
    for args in [
        &["sim", "scenarios/handoff.toml", "--compare", "--json"][..],
        &["sim", "scenarios/handoff.toml", "--compare"],
    ] {
        let mut child = latebind()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The read end closes long before the run has anything to print.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
