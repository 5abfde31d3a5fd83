use super::*;

#[test]
fn registry_builds() {
    let r = registry();
    assert!(r.roots.iter().all(Option::is_some));
}
