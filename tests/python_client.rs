//! The official Python `kubernetes` client works unmodified (CRUD, watch with
//! timeout_seconds, strategic merge and JSON patches, server-side apply).

mod support;

#[test]
fn python_client_works_unmodified() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output();
    match probe {
        Ok(out) if out.status.success() => {}
        _ => panic!("the Python kubernetes client is required: pip install kubernetes"),
    }
    let server = support::Server::start();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/client_test.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(&server.kubeconfig)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "python client test failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
}
