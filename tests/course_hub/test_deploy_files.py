"""deploy/ (Zero to JupyterHub): the files parse, use the chart's keys, agree with the lock and with each other."""

import re
from pathlib import Path

import pytest

from hub.layout import COURSE_ID, Layout

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
IMAGE_ROOT = Path("/srv/paged-kv")  # where deploy/Dockerfile lays the hub's folders in the image
# The chart version the values are written for, and the JupyterHub its hub image runs (its
# images/hub/requirements.txt at tag 4.4.0): the single-user server's major version must match.
CHART, CHART_JUPYTERHUB = "4.4.0", "5.5.0"
# Keys of the chart 4.4.0 values.yaml that deploy/z2jh-values.yaml may set (under hub.config and
# hub.extraConfig, in profileList entries and in volume specs the content is free).
CHART_KEYS = {
    "hub.config",
    "hub.extraConfig",
    "hub.extraVolumes",
    "hub.extraVolumeMounts",
    "hub.initContainers",
    "singleuser.image.name",
    "singleuser.image.tag",
    "singleuser.defaultUrl",
    "singleuser.cmd",
    "singleuser.memory.guarantee",
    "singleuser.memory.limit",
    "singleuser.cpu.guarantee",
    "singleuser.cpu.limit",
    "singleuser.profileList",
    "singleuser.storage.capacity",
    "singleuser.storage.extraVolumes",
    "singleuser.storage.extraVolumeMounts",
    "singleuser.initContainers",
    "cull.enabled",
    "cull.timeout",
}
FREE = {
    "hub.config",
    "hub.extraConfig",
    "hub.extraVolumes",
    "hub.extraVolumeMounts",
    "hub.initContainers",
    "singleuser.profileList",
    "singleuser.storage.extraVolumes",
    "singleuser.storage.extraVolumeMounts",
    "singleuser.initContainers",
}


def values():
    return yaml.safe_load((DEPLOY / "z2jh-values.yaml").read_text())


def key_paths(tree, prefix=""):
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path not in FREE:
            yield from key_paths(value, path + ".")
        else:
            yield path


def lock():
    pins = {}
    for line in (ROOT / "requirements-lock.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_every_deploy_yaml_file_parses():
    for path in sorted(DEPLOY.glob("*.yaml")):
        assert yaml.safe_load(path.read_text()), f"{path.name} is empty"


def test_the_values_use_only_keys_of_the_chart():
    unknown = sorted(set(key_paths(values())) - CHART_KEYS)
    assert unknown == [], f"not keys of the z2jh chart {CHART} values: {unknown}"


def test_the_dockerfile_installs_python_packages_only_from_the_lock():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11[-\w.]*$", text, re.M), "the lock is made on Python 3.11"
    installs = re.findall(r"pip install ([^\n\\&]+)", text)
    assert installs, "the Dockerfile installs nothing with pip"
    for arguments in installs:
        assert "-r /opt/paged-kv/requirements-lock.txt" in arguments or "--no-deps" in arguments, arguments
    assert "COPY requirements-lock.txt /opt/paged-kv/requirements-lock.txt" in text
    copied = [line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ")]
    assert not [c for c in copied if {"solutions", "autograder", "course", "."} & set(c)], (
        f"the students' image must not hold the solutions, graders or the whole repository: {copied}"
    )


def test_the_lock_holds_what_the_image_needs_and_the_charts_jupyterhub_major():
    pins = lock()
    for package in ("jupyterhub", "jupyterlab", "nbgrader", "torch"):
        assert package in pins, f"requirements-lock.txt does not pin {package}"
    assert pins["jupyterhub"].split(".")[0] == CHART_JUPYTERHUB.split(".")[0], (
        f"the image's jupyterhub {pins['jupyterhub']} and the chart {CHART}'s hub {CHART_JUPYTERHUB} differ in major"
    )


def test_the_values_name_the_image_the_dockerfile_builds():
    image = values()["singleuser"]["image"]
    assert f"{image['name']}:{image['tag']}" in (DEPLOY / "Dockerfile").read_text()


def test_the_exchange_volume_mounts_where_the_image_configures_the_exchange():
    layout = Layout(IMAGE_ROOT)
    storage = values()["singleuser"]["storage"]
    mounts = {m["name"]: m["mountPath"] for m in storage["extraVolumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in storage["extraVolumes"]}
    assert mounts == {"nbgrader-exchange": str(layout.exchange)}
    pvc = yaml.safe_load((DEPLOY / "exchange-pvc.yaml").read_text())
    assert claims["nbgrader-exchange"] == pvc["metadata"]["name"] and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert f"--hub-dir {IMAGE_ROOT}" in (DEPLOY / "Dockerfile").read_text()


def test_each_role_gets_the_settings_folder_the_image_writes():
    hook = values()["hub"]["extraConfig"]["paged-kv-roles.py"]
    layout = Layout(IMAGE_ROOT)
    assert f'"{layout.jupyter}/" + role' in hook
    assert f"ENV JUPYTER_CONFIG_PATH={layout.role_config('student')}" in (DEPLOY / "Dockerfile").read_text()
    assert "c.KubeSpawner.pre_spawn_hook" in hook


def _bytes(text) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)([KMG]?)", str(text)).groups()
    return float(number) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[unit]


def test_memory_limits_cover_the_measured_peak_of_each_lab():
    sizing = yaml.safe_load((DEPLOY / "sizing.yaml").read_text())
    server = sizing["server_mib"] * 2**20
    default_limit = _bytes(values()["singleuser"]["memory"]["limit"])
    profiles = values()["singleuser"]["profileList"]
    big = _bytes(next(p for p in profiles if "06" in p["display_name"])["kubespawner_override"]["mem_limit"])
    for lab, peak in sizing["kernel_peak_mib"].items():
        limit = big if lab.startswith("06") else default_limit
        assert server + peak * 2**20 < limit, (
            f"{lab}: {peak} MiB kernel + server over the limit {limit / 2**20:.0f} MiB"
        )


def test_an_init_container_sets_the_exchanges_modes_as_root_on_the_volume():
    """nbgrader 0.9.6's modes (its exchange/default/release_assignment.py and release_feedback.py), set on
    the mounted volume (the image's folder is hidden by the mount) by the same init container before the hub
    starts and before every server starts; the hub's pod mounts the exchange too (its uid registry)."""
    single, hub = values()["singleuser"], values()["hub"]
    (init,) = single["initContainers"]
    assert hub["initContainers"] == [init], "the hub's pod runs the same init container"
    assert hub["extraVolumes"] == single["storage"]["extraVolumes"]
    assert hub["extraVolumeMounts"] == single["storage"]["extraVolumeMounts"]
    image = single["image"]
    assert init["image"] == f"{image['name']}:{image['tag']}"
    # as root, also in the hub's pod, whose securityContext says runAsNonRoot
    assert init["securityContext"] == {"runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 0}
    exchange = str(Layout(IMAGE_ROOT).exchange)
    assert init["volumeMounts"] == [{"name": "nbgrader-exchange", "mountPath": exchange}]
    assert init["command"][:2] == ["sh", "-c"]
    script = init["command"][2]
    assert script.startswith("set -e;") and f"X={exchange}; C=$X/{COURSE_ID};" in script
    steps = [step.strip() for step in script.split(";")]
    for step in (
        "mkdir -p $C/inbound $C/outbound $C/feedback $C/hub-uids",
        "chown 0:0 $X",
        "chmod 1777 $X",
        "chown 1000:100 $C $C/inbound $C/outbound $C/feedback $C/hub-uids",
        "chmod 0755 $C $C/outbound $C/hub-uids",
        "chmod 2733 $C/inbound",
        "chmod 0711 $C/feedback",
    ):
        assert step in steps, step
    assert not [s for s in steps if "-R" in s.split()], "only the folders nbgrader makes, never what is in them"
    assert "chmod 0777" not in (DEPLOY / "Dockerfile").read_text(), "the mount hides the image's folder"


def test_the_init_containers_script_gives_nbgraders_modes_and_can_run_twice(tmp_path):
    """The script itself, on a folder here (chown left out unless root): the modes, twice in a row."""
    import os
    import stat

    from deploy_hub import run_init_containers

    for _ in range(2):
        run_init_containers(values(), {"nbgrader-exchange": tmp_path / "exchange"})
        modes = {
            name: stat.S_IMODE((tmp_path / "exchange" / name).stat().st_mode)
            for name in (
                "",
                "paged-kv",
                "paged-kv/inbound",
                "paged-kv/outbound",
                "paged-kv/feedback",
                "paged-kv/hub-uids",
            )
        }
        assert modes == {
            "": 0o1777,
            "paged-kv": 0o755,
            "paged-kv/inbound": 0o2733,
            "paged-kv/outbound": 0o755,
            "paged-kv/feedback": 0o711,
            "paged-kv/hub-uids": 0o755,
        }
    if os.geteuid() == 0:
        assert (tmp_path / "exchange" / "paged-kv" / "inbound").stat().st_uid == 1000
