"""What scripts/check-deploy asks of the deployment files beyond the linters.

Each subcommand prints the problems it finds, one a line, and exits 1 if
there is any. "Facts" are the things that tie the files together and that
no schema knows: the port the edge listens on is the one exposed and
probed, the grace periods are longer than the drain that the binary
resolves from the configuration, the build copies what the binary needs.

    render CHART OUT [VALUES...]       helm lint + render (Helm's Go SDK)
    extract-config RENDERED OUT        the ConfigMap's tether.toml
    optional-on IN OUT                 turn on the "#key = value" lines
    dockerfile DOCKERFILE RESOLVED     facts of the image
    unit UNIT RESOLVED                 facts of the systemd unit
    manifests RENDERED RESOLVED        facts of the rendered chart
    docs MARKDOWN                      every repository path it names exists
    smoke BIN CONFIG                   serve CONFIG on loopback: probes, SIGTERM, exit 0

RESOLVED is what `tether config check FILE` printed for the configuration
the artifact runs with.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = re.compile(r"^#(\[[A-Za-z0-9_.]+\]|[a-z_]+ = .*)$")


class Unresolved(Exception):
    """The resolved configuration this check compares with is missing."""


def resolved(path: str) -> dict:
    try:
        return tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise Unresolved(f"no resolved configuration to compare with ({e}): its config check failed") from e


def listen_port(cfg: dict) -> int:
    return int(cfg["listen"].rsplit(":", 1)[1])


def drain_s(cfg: dict) -> float:
    return cfg["limits"]["drain_timeout_ms"] / 1000


# ---------------------------------------------------------------- helm

def render(chart: str, out: str, *values: str) -> list[str]:
    import helm_python as helm
    import yaml

    problems = []
    report = helm.lint(chart)
    for e in report.get("errors") or []:
        problems.append(f"helm lint: {e}")
    for m in report.get("messages") or []:
        if m.get("severity", 0) >= 2:  # 1 info, 2 warning, 3 error
            problems.append(f"helm lint: {m.get('path')}: {m.get('error')}")
    merged: dict = {}
    for v in values:
        merged = deep_merge(merged, yaml.safe_load(Path(v).read_text()) or {})
    try:
        with helm.Chart.load(chart) as c:
            manifests = c.render(merged, name="tether", namespace="tether")
    except helm.HelmError as e:
        return problems + [f"helm render: {e}"]
    docs = []
    for name in sorted(manifests):
        if name.endswith(".yaml") and manifests[name].strip():
            docs.append(f"# Source: {name}\n{manifests[name].strip()}\n")
    Path(out).write_text("---\n".join(docs))
    return problems


def deep_merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_docs(path: str) -> list[dict]:
    import yaml

    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


def extract_config(rendered: str, out: str) -> list[str]:
    cms = [d for d in load_docs(rendered) if d["kind"] == "ConfigMap" and "tether.toml" in d.get("data", {})]
    if len(cms) != 1:
        return [f"expected one ConfigMap with tether.toml, found {len(cms)}"]
    Path(out).write_text(cms[0]["data"]["tether.toml"])
    return []


def optional_on(src: str, out: str) -> list[str]:
    lines = Path(src).read_text().splitlines()
    on = [OPTIONAL.sub(r"\1", l) for l in lines]
    if on == lines:
        return [f"{src}: no optional (#key = value) lines to turn on"]
    Path(out).write_text("\n".join(on) + "\n")
    return []


# ---------------------------------------------------------------- Dockerfile

def ignore_patterns(path: Path) -> list[tuple[bool, re.Pattern]]:
    pats = []
    if not path.exists():
        return pats
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = line.lstrip("!").strip("/")
        rx = ""
        i = 0
        while i < len(line):
            if line.startswith("**/", i):
                rx += "(?:.*/)?"
                i += 3
            elif line.startswith("**", i):
                rx += ".*"
                i += 2
            elif line[i] == "*":
                rx += "[^/]*"
                i += 1
            elif line[i] == "?":
                rx += "[^/]"
                i += 1
            else:
                rx += re.escape(line[i])
                i += 1
        pats.append((negate, re.compile(rx + "$")))
    return pats


def ignored(rel: str, pats) -> bool:
    """Docker's rule: the last matching pattern wins; a directory's match covers what is inside."""
    parts = rel.strip("/").split("/")
    state = False
    for negate, rx in pats:
        for n in range(1, len(parts) + 1):
            if rx.match("/".join(parts[:n])):
                state = not negate
                break
    return state


def dockerfile(path: str, resolved_path: str) -> list[str]:
    from dockerfile_parse import DockerfileParser

    problems = []
    cfg = resolved(resolved_path)
    df = DockerfileParser(path=path)
    stages: list[list[dict]] = []
    for ins in df.structure:
        if ins["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    if len(stages) < 2:
        return ["expected a multi-stage build (builder, then runtime)"]
    final = stages[-1]

    def values(stage, name):
        return [i["value"] for i in stage if i["instruction"] == name]

    base = final[0]["value"].split()[0]
    if not base.startswith("gcr.io/distroless/"):
        problems.append(f"runtime image {base} is not distroless")
    runs = " ".join(v for s in stages[:-1] for v in values(s, "RUN"))
    if "cargo build --locked --release --bin tether" not in runs:
        problems.append("no builder RUN does `cargo build --locked --release --bin tether`")
    users = values(final, "USER")
    if not users or users[-1].split(":")[0] in ("root", "0"):
        if ":nonroot" not in base:
            problems.append("the runtime stage does not run as a non-root user")
    if values(final, "STOPSIGNAL") != ["SIGTERM"]:
        problems.append(f"STOPSIGNAL is {values(final, 'STOPSIGNAL')}, not SIGTERM")
    ep = values(final, "ENTRYPOINT")
    if not ep or json.loads(ep[-1]) != ["tether"]:
        problems.append(f'ENTRYPOINT is {ep}, not ["tether"]')
    cmd = values(final, "CMD")
    if not cmd or json.loads(cmd[-1]) != ["serve", "--config", "/etc/tether/tether.toml"]:
        problems.append(f'CMD is {cmd}, not ["serve", "--config", "/etc/tether/tether.toml"]')
    vols = " ".join(values(final, "VOLUME"))
    for v in ("/etc/tether", "/var/lib/tether"):
        if f'"{v}"' not in vols and f" {v}" not in f" {vols}":
            problems.append(f"no VOLUME {v}")
    exposed = {p.split("/")[0] for e in values(final, "EXPOSE") for p in e.split()}
    if str(listen_port(cfg)) not in exposed:
        problems.append(f"EXPOSE {sorted(exposed)} misses the configured port {listen_port(cfg)}")
    if not cfg["listen"].startswith(("0.0.0.0:", "[::]:")):
        problems.append(f"the image's config listens on {cfg['listen']}: unreachable from outside the container")
    if cfg["data_dir"] != "/var/lib/tether":
        problems.append(f"the image's config keeps its data in {cfg['data_dir']}, not the /var/lib/tether volume")
    # No shell in distroless: the check must be tether's own probe, exec form, on the configured port.
    checks = values(final, "HEALTHCHECK")
    probe = checks[-1].split("CMD", 1)[-1].strip() if checks else ""
    try:
        argv = json.loads(probe) if probe.startswith("[") else None
    except json.JSONDecodeError:
        argv = None
    want_url = f"http://127.0.0.1:{listen_port(cfg)}/healthz"
    if not argv or argv[:2] != ["tether", "probe"] or want_url not in argv:
        problems.append(f'HEALTHCHECK is {checks}, not CMD ["tether", "probe", "--url", "{want_url}", ...] (exec form: no shell)')

    # The build context: what COPY reads must exist and not be excluded.
    pats = ignore_patterns(ROOT / ".dockerignore")
    copied = []
    for stage in stages:
        for ins in stage:
            if ins["instruction"] not in ("COPY", "ADD"):
                continue
            words = [w for w in ins["value"].split() if not w.startswith("--")]
            if "--from=" in ins["value"]:
                continue
            for src in words[:-1]:
                copied.append(src.rstrip("/"))
                if not (ROOT / src).exists():
                    problems.append(f"line {ins['startline'] + 1}: COPY {src}: not in the repository")
                elif ignored(src, pats):
                    problems.append(f"line {ins['startline'] + 1}: COPY {src}: excluded by .dockerignore")
    if "deploy/tether.toml" not in copied:
        problems.append("the image does not ship deploy/tether.toml")

    def in_context(rel: str) -> bool:
        return any(rel == c or rel.startswith(c + "/") for c in copied) and not ignored(rel, pats)

    # Everything the compiler reads: the workspace members, and every file
    # pulled in with include_str!/include_bytes!.
    manifest = tomllib.loads((ROOT / "Cargo.toml").read_text())
    for member in manifest["workspace"]["members"]:
        if not in_context(member):
            problems.append(f"workspace member {member} is not copied into the build")
    for rs in list((ROOT / "src").rglob("*.rs")) + list((ROOT / "crates").rglob("*.rs")):
        for m in re.finditer(r'include_(?:str|bytes)!\(\s*"([^"]+)"', rs.read_text()):
            target = (rs.parent / m.group(1)).resolve()
            rel = target.relative_to(ROOT).as_posix()
            if not target.exists():
                problems.append(f"{rs.relative_to(ROOT)} includes {m.group(1)}, which does not exist")
            elif not in_context(rel):
                problems.append(f"{rs.relative_to(ROOT)} includes {rel}, which the build does not copy")
    return problems


# ---------------------------------------------------------------- systemd

def seconds(v: str) -> float:
    total, units = 0.0, {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "ms": 0.001}
    for n, u in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", v):
        total += float(n) * units[u]
    return total


def unit(path: str, resolved_path: str) -> list[str]:
    cfg = resolved(resolved_path)
    keys: dict[str, list[str]] = {}
    section = ""
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif line and not line.startswith(("#", ";")) and "=" in line:
            k, v = line.split("=", 1)
            keys.setdefault(f"{section}.{k.strip()}", []).append(v.strip())

    def one(k):
        v = keys.get(f"Service.{k}")
        return v[-1] if v else None

    problems = []
    want = {
        "ExecStart": "/usr/bin/tether serve --config /etc/tether/tether.toml",
        "KillSignal": "SIGTERM",
        "Restart": "on-failure",
        "StateDirectory": "tether",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
    }
    for k, v in want.items():
        if one(k) != v:
            problems.append(f"{k}={one(k)}, want {v}")
    if one("DynamicUser") != "yes" and one("User") in (None, "root", "0"):
        problems.append("runs as root: set DynamicUser=yes or User=")
    stop = seconds(one("TimeoutStopSec") or "90")
    need = drain_s(cfg) + 5
    if stop <= need:
        problems.append(f"TimeoutStopSec={stop:g}s must be more than drain_timeout_ms/1000 + 5 = {need:g}s")
    nofile = one("LimitNOFILE") or "0"
    if nofile != "infinity" and int(nofile.split(":")[-1]) < 65536:
        problems.append(f"LimitNOFILE={nofile}: one file descriptor per session needs far more")
    env = " ".join(keys.get("Service.Environment", []))
    if "TETHER_DATA_DIR=/var/lib/tether" not in env and cfg["data_dir"] != "/var/lib/tether":
        problems.append(f"data_dir {cfg['data_dir']} is not the state directory /var/lib/tether")
    return problems


# ---------------------------------------------------------------- Kubernetes

def manifests(rendered: str, resolved_path: str) -> list[str]:
    cfg = resolved(resolved_path)
    docs = load_docs(rendered)
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    problems = []
    deps = by_kind.get("Deployment", [])
    if len(deps) != 1:
        return [f"expected one Deployment, found {len(deps)}"]
    dep = deps[0]
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    c = spec["containers"][0]
    port = listen_port(cfg)
    named = {p["name"]: p["containerPort"] for p in c.get("ports", [])}

    def port_of(ref):
        return named.get(ref, ref)

    if port not in named.values():
        problems.append(f"containerPort {sorted(named.values())} is not the listen port {port}")
    if not cfg["listen"].startswith(("0.0.0.0:", "[::]:")):
        problems.append(f"listen = {cfg['listen']}: unreachable from outside the pod")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c.get(probe, {}).get("httpGet", {})
        if get.get("path") != path or port_of(get.get("port")) != port:
            problems.append(f"{probe} is {get}, want GET {path} on {port}")
    sleep = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds")
    if not sleep:
        problems.append("no preStop sleep")
    grace = spec.get("terminationGracePeriodSeconds", 30)
    need = (sleep or 0) + drain_s(cfg) + 5
    if grace <= need:
        problems.append(f"terminationGracePeriodSeconds {grace} must be more than preStop + drain + 5 = {need:g}")
    ann = pod["metadata"].get("annotations", {})
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/path") != "/metrics" or ann.get(
        "prometheus.io/port"
    ) != str(port):
        problems.append(f"Prometheus annotations {ann} do not scrape /metrics on {port}")
    env = {e["name"]: e for e in c.get("env", [])}
    if "secretKeyRef" not in env.get("TETHER_JWT_SECRET", {}).get("valueFrom", {}):
        problems.append("TETHER_JWT_SECRET does not come from a Secret: edges would each generate their own")
    req = c.get("resources", {}).get("requests", {})
    if not (req.get("cpu") and req.get("memory")):
        problems.append("no cpu and memory requests")
    if c.get("args") != ["serve", "--config", "/etc/tether/tether.toml"]:
        problems.append(f"args {c.get('args')} do not run serve --config /etc/tether/tether.toml")
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    cm_name = volumes.get(mounts.get("/etc/tether", ""), {}).get("configMap", {}).get("name")
    cms = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    if "tether.toml" not in cms.get(cm_name, {}).get("data", {}):
        problems.append("/etc/tether is not mounted from the ConfigMap holding tether.toml")
    jwks = cfg.get("auth", {}).get("jwks_file")
    if jwks and not any(jwks.startswith(m.rstrip("/") + "/") for m in mounts):
        problems.append(f"[auth] jwks_file {jwks} is on no mounted volume")
    if cfg["data_dir"] not in mounts:
        problems.append(f"data_dir {cfg['data_dir']} is not a mounted volume (the root filesystem is read-only)")
    sel = dep["spec"]["selector"]["matchLabels"]
    svcs = [s for s in by_kind.get("Service", []) if s["spec"].get("selector") == sel]
    if not svcs:
        problems.append("no Service selects the edges")
    for s in svcs:
        if s["spec"].get("sessionAffinity", "None") != "None":
            problems.append(f"Service {s['metadata']['name']} pins sessions: a device resumes on any edge")
        if not any(port_of(p.get("targetPort", p["port"])) == port for p in s["spec"]["ports"]):
            problems.append(f"Service {s['metadata']['name']} does not reach port {port}")
    replicas = dep["spec"].get("replicas", 1)
    nats = cfg.get("cluster", {}).get("nats")
    if replicas > 1 and not nats:
        problems.append(f"{replicas} edges without [cluster]: they would split the fleet")
    if nats:
        m = re.match(r"nats://([^:/]+):(\d+)$", nats)
        if not m:
            problems.append(f"[cluster] nats = {nats} is not nats://HOST:PORT")
        else:
            host, nport = m.group(1), int(m.group(2))
            target = [s for s in by_kind.get("Service", []) if s["metadata"]["name"] == host]
            sts = by_kind.get("StatefulSet", [])
            if target and not any(p["port"] == nport for p in target[0]["spec"]["ports"]):
                problems.append(f"Service {host} has no port {nport}")
            if target and sts:
                headless = [s for s in by_kind["Service"] if s["spec"].get("clusterIP") == "None"]
                if not any(s["metadata"]["name"] == sts[0]["spec"]["serviceName"] for s in headless):
                    problems.append("the NATS StatefulSet's serviceName is no headless Service")
    pdbs = by_kind.get("PodDisruptionBudget", [])
    if replicas > 1 and not any(p["spec"]["selector"]["matchLabels"] == sel for p in pdbs):
        problems.append("no PodDisruptionBudget for the edges")
    return problems


# ---------------------------------------------------------------- docs

def docs(path: str) -> list[str]:
    text = Path(path).read_text()
    problems = []
    for m in re.finditer(r"\]\(([^)#\s]+)", text):
        link = m.group(1)
        if re.match(r"[a-z]+:", link):
            problems.append(f"link to outside the repository: {link}")
        elif not (Path(path).parent / link).exists():
            problems.append(f"broken link: {link}")
    for m in re.finditer(r"(?<![\w./-])((?:deploy|scripts|docs|src|crates)/[\w./-]*\w)", text):
        if not (ROOT / m.group(1)).exists():
            problems.append(f"names {m.group(1)}, which does not exist")
    return problems


# ---------------------------------------------------------------- smoke

def smoke(binary: str, config: str) -> list[str]:
    """Runs `tether serve --config CONFIG` on a free loopback port (the flag
    overrides the file's listen), reads its probes (also with `tether probe`)
    and metrics, sends SIGTERM
    and expects exit 0 well within the unit's TimeoutStopSec."""
    import os
    import signal
    import subprocess
    import tempfile
    import time
    import urllib.error
    import urllib.request

    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    problems = []
    with tempfile.TemporaryDirectory() as data:
        proc = subprocess.Popen(
            [binary, "serve", "--config", config, "--listen", "127.0.0.1:0", "--data-dir", data],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            line = proc.stdout.readline().strip()
            if not line.startswith("listening on ws://"):
                proc.kill()
                return [f"serve did not start: {line!r} {proc.stderr.read()[-2000:]}"]
            base = "http://" + line.removeprefix("listening on ws://")

            def get(path):
                try:
                    with urllib.request.urlopen(base + path, timeout=5) as r:
                        return r.status, r.read().decode()
                except urllib.error.HTTPError as e:
                    return e.code, e.read().decode()

            for path, want in (("/healthz", "ok"), ("/readyz", "ready")):
                status, body = get(path)
                if status != 200 or not body.startswith(want):
                    problems.append(f"GET {path}: {status} {body!r}, want 200 {want}")
            # The image's HEALTHCHECK: `tether probe` passes on /healthz, fails elsewhere.
            for path, ok in (("/healthz", True), ("/readyz", True), ("/no-such-probe", False)):
                probe = subprocess.run(
                    [binary, "probe", "--url", base + path], capture_output=True, text=True, env=env, timeout=10
                )
                if (probe.returncode == 0) != ok:
                    problems.append(f"tether probe --url {base + path}: exit {probe.returncode} {probe.stderr.strip()!r}")
            status, body = get("/metrics")
            if status != 200 or "tether_sessions" not in body:
                problems.append(f"GET /metrics: {status}, no tether_sessions in {len(body)} bytes")
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
            took = time.monotonic() - began
            if code != 0:
                problems.append(f"exit {code} after SIGTERM, want 0: {proc.stderr.read()[-2000:]}")
            print(f"drained and exited {code} in {took:.2f} s")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                problems.append("still running 30 s after SIGTERM")
    return problems


def main(argv: list[str]) -> int:
    commands = {
        "render": render,
        "extract-config": extract_config,
        "optional-on": optional_on,
        "dockerfile": dockerfile,
        "unit": unit,
        "manifests": manifests,
        "docs": docs,
        "smoke": smoke,
    }
    if len(argv) < 2 or argv[1] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        problems = commands[argv[1]](*argv[2:])
    except Unresolved as e:
        problems = [str(e)]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
