//! Shared helpers of the privileged lab tests.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

/// Whether the test may run: true as root. Not root: skipped with a printed reason,
/// except when `CI=true`, where it fails (CI must run the lab's tests as root).
pub(crate) fn root_or_skip(test: &str) -> bool {
    if latebind_lab::run::require_root().is_ok() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: CI=true but not running as root: the lab's tests need root");
    }
    eprintln!("skipping {test}: needs root (network namespaces, veths, qdiscs)");
    false
}

/// The binary that serves `emulate` and `traffic` for the runner.
pub(crate) fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lab-dev"))
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Timing tests of one binary run one at a time (the machine has 2 CPUs).
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh folder for a test's files.
pub(crate) fn test_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("latebind-lab-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// The scenarios folder of the workspace.
pub(crate) fn scenario(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
}

/// Processes running the helper binary (`lab-dev`: emulator, traffic tools, daemons)
/// now, as `pid: command line`. The tests themselves are another binary.
pub(crate) fn helper_processes() -> Vec<String> {
    let exe = std::fs::canonicalize(exe()).unwrap_or_else(|_| exe());
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(target) = std::fs::read_link(e.path().join("exe")) else {
            continue;
        };
        if target == exe {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// The flow named `name` in a report (lab or simulator).
pub(crate) fn flow<'a>(
    r: &'a latebind_sim::Report,
    name: &str,
) -> &'a latebind_sim::report::FlowReport {
    r.flows
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no flow {name} in the report"))
}
