//! Helpers shared by the CLI's integration tests.

/// Whether the test may run: it needs root (`what` says for what). Without root it prints
/// why and the test passes, except under `CI=true`, where a missing privilege is a
/// failure.
pub(crate) fn root_or_skip(name: &str, what: &str) -> bool {
    if nix::unistd::Uid::effective().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{name}: needs root, and CI=true"
    );
    eprintln!("{name}: skipped: needs root ({what})");
    false
}
