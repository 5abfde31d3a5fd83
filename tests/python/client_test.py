"""The official Python client against a running k3rs server.

Usage: python3 client_test.py <kubeconfig>. Exits non-zero with a message on the
first failed check.
"""
import sys
import time

try:
    from kubernetes import client, config, dynamic, watch
    from kubernetes.client.rest import ApiException
except ImportError:
    sys.exit("the Python kubernetes client is missing: pip install kubernetes")


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)


def main(kubeconfig):
    config.load_kube_config(config_file=kubeconfig)
    core = client.CoreV1Api()
    ns = "py"
    core.create_namespace({"metadata": {"name": ns}})

    # CRUD
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "c1", "labels": {"x": "y"}}, "data": {"a": "1"}})
    check(cm.metadata.uid, "created configmap has a uid")
    got = core.read_namespaced_config_map("c1", ns)
    check(got.data == {"a": "1"}, "read back data")
    got.data["b"] = "2"
    replaced = core.replace_namespaced_config_map("c1", ns, got)
    check(int(replaced.metadata.resource_version) > int(cm.metadata.resource_version), "resourceVersion increases")
    listed = core.list_namespaced_config_map(ns, label_selector="x=y")
    check(len(listed.items) == 1, "label selector list")
    try:
        core.read_namespaced_config_map("missing", ns)
        check(False, "missing configmap raises")
    except ApiException as e:
        check(e.status == 404, "404 for a missing object")

    # Watch with timeout_seconds: events arrive, and the stream ends by itself.
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "c2"}})
    w = watch.Watch()
    started = time.time()
    seen = []
    for event in w.stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=3):
        seen.append((event["type"], event["object"].metadata.name))
    check(("ADDED", "c2") in seen, "watch saw c2 added: %r" % seen)
    check(time.time() - started < 10, "watch ended after timeout_seconds")

    # Strategic merge patch of a Service with a dict: ports merge by port.
    core.create_namespaced_service(ns, {"metadata": {"name": "s"}, "spec": {"selector": {"a": "b"},
        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
    patched = core.patch_namespaced_service("s", ns, {"spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}})
    ports = sorted(p.port for p in patched.spec.ports)
    check(ports == [80, 443], "strategic merge kept port 80 and added 443: %r" % ports)

    # JSON patch.
    core.api_client.set_default_header("Content-Type", "application/json-patch+json")
    patched = core.patch_namespaced_config_map("c1", ns, [{"op": "add", "path": "/data/c", "value": "3"}])
    core.api_client.default_headers.pop("Content-Type", None)
    check(patched.data.get("c") == "3", "JSON patch added a key")

    # Server-side apply through the dynamic client.
    dyn = dynamic.DynamicClient(client.ApiClient())
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied", "namespace": ns}, "data": {"k": "v"}}
    applied = cms.server_side_apply(body=body, field_manager="py-test", namespace=ns)
    check(applied.data.k == "v", "server-side apply created the object")
    managers = [m.manager for m in applied.metadata.managedFields]
    check("py-test" in managers, "managedFields names the applier: %r" % managers)

    core.delete_namespaced_config_map("c1", ns)
    print("python client: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
