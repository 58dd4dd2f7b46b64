"""``make screenshots``: PNGs of the dashboard from a fresh demo, taken in headless Chromium.

Starts ``manage.py run_demo`` in a temporary directory (its own SQLite database, filesystem
broker, sandbox fleet, Celery worker, watcher and web server), logs in as the demo scientist,
previews and submits ``examples/eo-pipeline.yaml``, waits for the run to finish, and writes

    docs/screenshots/runs.png            the runs list
    docs/screenshots/submit-preview.png  the submit page with the placement preview
    docs/screenshots/run.png             the finished demo run (DAG, timeline, units, decisions)
    docs/screenshots/fleet.png           the fleet
    docs/screenshots/step-panel.png      the step panel of the demo run's preprocess (logs)
    docs/screenshots/failover.png        a step failed over for real: its site made not Ready
                                         with the sandbox's fault injection while it ran
    docs/screenshots/fan-out.png         a 200-item fan-out drawn as one group node
    docs/screenshots/run-390.png         the run page on a 390 px wide screen

Should the demo's execution not finish the run (no sandbox or worker), the run is completed
through the ORM instead and the script says so: the picture then shows the pages, not a real run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
USER, PASSWORD = "scientist", "portal-demo"
VIEWPORT = {"width": 1360, "height": 900}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the demo exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"{url} did not answer in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def finish_through_orm(var_dir: Path, run_id: int, only_setup: bool = False) -> None:
    """The fallback when nothing executes the run: mark it finished as the pipeline would."""
    os.environ["PORTAL_VAR_DIR"] = str(var_dir)
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    if only_setup:
        return
    from datetime import timedelta

    from django.utils import timezone

    from portal.models import UnitRun, WorkflowRun

    run = WorkflowRun.objects.get(pk=run_id)
    start = run.created_at
    for i, unit in enumerate(UnitRun.objects.filter(run=run).order_by("position")):
        unit.site = unit.site or unit.planned_site
        unit.phase = "Succeeded"
        unit.started_at = start + timedelta(seconds=20 * i + 1)
        unit.finished_at = start + timedelta(seconds=20 * i + 18)
        unit.save()
    run.status = "Succeeded"
    run.started_at = start
    run.finished_at = timezone.now()
    run.save()


def fan_out_yaml(items: int) -> str:
    values = ", ".join(f'"t{i:04d}"' for i in range(items))
    return f"""apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: tile-fan-out-
spec:
  entrypoint: main
  templates:
    - name: main
      dag:
        tasks:
          - name: prepare
            template: step
          - name: tile
            template: step
            depends: prepare
            withItems: [{values}]
          - name: report
            template: step
            depends: tile
    - name: step
      container:
        image: alpine:3.20
        command: [sh, -c, "echo reading inputs; echo working; echo done"]
        resources:
          requests:
            cpu: 100m
            memory: 64Mi
"""


FAILOVER_YAML = """apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: failover-demo-
spec:
  entrypoint: main
  templates:
    - name: main
      dag:
        tasks:
          - name: prepare
            template: quick
          - name: simulate
            template: slow
            depends: prepare
    - name: quick
      container:
        image: alpine:3.20
        command: [sh, -c, "echo inputs ready"]
    - name: slow
      metadata:
        annotations:
          portal.multisite.io/sandbox-duration: 40m
      container:
        image: alpine:3.20
        command: [sh, -c, "echo simulating; sleep 90; echo simulated 40 minutes of weather"]
        resources:
          requests:
            cpu: 100m
            memory: 64Mi
"""


def api_get(page: Any, path: str) -> Any:
    return page.evaluate(f"fetch('{path}').then(r => r.json())")


def fail_over(page: Any, base: str, kubeconfig: Path, wait_s: float) -> int:
    """A step that loses its site while it runs: the sandbox's fault injection makes that
    site not Ready; after the grace period the portal runs the step again elsewhere."""
    page.goto(f"{base}/submit/")
    page.fill("#id_manifest", FAILOVER_YAML)
    page.select_option("#id_project", "eo-demo")
    page.click("button:has-text('Submit'):not(:has-text('Preview'))")
    page.wait_for_url("**/runs/*/", timeout=60_000)
    run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    unit_url = f"/api/v1/runs/{run_id}/units/simulate/"
    deadline = time.monotonic() + wait_s
    while (unit := api_get(page, unit_url))["phase"] != "Running":
        if time.monotonic() > deadline:
            sys.exit(f"the failover demo's step never ran: {unit}")
        time.sleep(0.5)
    site = unit["site"]
    fault = [sys.executable, "-m", "sandbox", "fault", "--kubeconfig", str(kubeconfig)]
    fault += ["site-not-ready", "--site", site, "--duration", "150"]
    subprocess.run(fault, check=True, capture_output=True, cwd=ROOT)
    while (unit := api_get(page, unit_url))["attempt"] < 2 or unit["phase"] != "Succeeded":
        if time.monotonic() > deadline + 300:
            sys.exit(f"the step was not failed over from {site}: {unit}")
        time.sleep(1)
    return run_id


def shoot(base: str, var_dir: Path, wait_s: float, kubeconfig: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    demo_yaml = (ROOT / "examples" / "eo-pipeline.yaml").read_text()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
        log_in(page, base)
        shoot_preview(page, base, demo_yaml, written)
        run_url, run_id, how = shoot_run(page, var_dir, wait_s, written)
        panel_has_log = shoot_step_panel(page, run_url, written)
        shoot_lists(page, base, demo_yaml, run_url, written)
        fan_how = shoot_fan_out(page, base, wait_s, panel_has_log, written)
        shoot_failover(page, base, kubeconfig, wait_s, written)
        browser.close()
    print(f"the fan-out run: {fan_how}")
    print(f"the demo run {run_id}: {how}")
    return written


def log_in(page: Any, base: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", USER)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def shoot_preview(page: Any, base: str, demo_yaml: str, written: list[Path]) -> None:
    """Submit with the preview shown."""
    from playwright.sync_api import expect

    page.goto(f"{base}/submit/")
    page.fill("#id_manifest", demo_yaml)
    expect(page.locator("select[name=param-model]")).to_be_visible(timeout=20_000)
    page.select_option("#id_project", "eo-demo")
    page.click("button:has-text('Preview placement')")
    expect(page.locator("#preview table.plan")).to_be_visible(timeout=30_000)
    # One unit's candidate table open: the losing sites and why.
    page.locator("#preview details.candidates-of summary").last.click()
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.evaluate("document.getElementById('id_manifest').scrollTop = 0")
    written.append(OUT / "submit-preview.png")
    page.screenshot(path=written[-1], full_page=True)


def shoot_run(page: Any, var_dir: Path, wait_s: float, written: list[Path]) -> tuple[str, int, str]:
    """Submit the previewed run, then follow it until it finishes: its URL, id and how it
    finished."""
    from playwright.sync_api import expect

    page.click("button:has-text('Submit'):not(:has-text('Preview'))")
    page.wait_for_url("**/runs/*/")
    run_url = page.url
    run_id = int(run_url.rstrip("/").rsplit("/", 1)[1])
    finished = page.locator("#run-live[data-finished=true]")
    try:
        expect(finished).to_have_count(1, timeout=wait_s * 1000)
        how = "executed by the demo's sandbox fleet, worker and watcher"
    except AssertionError:
        finish_through_orm(var_dir, run_id)
        how = "NOT executed: completed through the ORM (no execution pipeline answered)"
    page.goto(run_url)
    expect(finished).to_have_count(1)
    page.locator("details.decision summary").first.click()
    written.append(OUT / "run.png")
    page.screenshot(path=written[-1], full_page=True)
    return run_url, run_id, how


def shoot_step_panel(page: Any, run_url: str, written: list[Path]) -> bool:
    """At once, while the site still has the pods: the step panel of preprocess (a push-mode
    site: logs through Karmada's cluster proxy, or the reason they are not). Whether it
    showed a log."""
    from playwright.sync_api import expect

    page.goto(run_url)
    page.locator("#run-live svg.dag g.node[data-unit=preprocess]").click()
    expect(page.locator("#unit-logs:not([hx-trigger=load])")).to_have_count(1, timeout=20_000)
    # A step whose image the sandbox cannot run printed nothing: the panel is then shot
    # on the fan-out's last step instead (a shell step that really ran), below.
    panel_has_log: bool = page.locator("#unit-logs pre.log-text").count() > 0
    if panel_has_log:
        written.append(OUT / "step-panel.png")
        page.screenshot(path=written[-1], full_page=True)
    return panel_has_log


def shoot_lists(page: Any, base: str, demo_yaml: str, run_url: str, written: list[Path]) -> None:
    """The runs list (one run finished, one in progress), the fleet, the run page on a phone."""
    from playwright.sync_api import expect

    # A second run, so the list shows one finished and one in progress.
    page.goto(f"{base}/submit/")
    page.fill("#id_manifest", demo_yaml)
    expect(page.locator("select[name=param-model]")).to_be_visible(timeout=20_000)
    page.select_option("#id_project", "eo-demo")
    page.select_option("select[name=param-model]", "land-cover-v2")
    page.click("button:has-text('Submit'):not(:has-text('Preview'))")
    page.wait_for_url("**/runs/*/")
    page.wait_for_timeout(1500)
    page.goto(f"{base}/runs/")
    written.append(OUT / "runs.png")
    page.screenshot(path=written[-1], full_page=True)

    page.goto(f"{base}/fleet/")
    written.append(OUT / "fleet.png")
    page.screenshot(path=written[-1], full_page=True)

    # The run page on a phone.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(run_url)
    written.append(OUT / "run-390.png")
    page.screenshot(path=written[-1], full_page=True)
    page.set_viewport_size(VIEWPORT)


def shoot_fan_out(
    page: Any, base: str, wait_s: float, panel_has_log: bool, written: list[Path]
) -> str:
    """A big fan-out: prepare, 200 tiles, report. How far it got when shot."""
    from playwright.sync_api import expect

    page.goto(f"{base}/submit/")
    page.fill("#id_manifest", fan_out_yaml(200))
    page.select_option("#id_project", "eo-demo")
    page.click("button:has-text('Submit'):not(:has-text('Preview'))")
    page.wait_for_url("**/runs/*/", timeout=60_000)
    fan_url = page.url
    try:
        expect(page.locator("#run-live[data-finished=true]")).to_have_count(
            1, timeout=wait_s * 1000
        )
        fan_how = "finished"
    except AssertionError:
        fan_how = "still running when shot"
    page.goto(fan_url)
    written.append(OUT / "fan-out.png")
    # The top of the page: status, outputs, the graph with its group node and counts.
    page.set_viewport_size({"width": VIEWPORT["width"], "height": 1100})
    page.screenshot(path=written[-1])
    page.set_viewport_size(VIEWPORT)
    if not panel_has_log:
        page.goto(f"{fan_url}units/report/")
        expect(page.locator("#unit-logs pre.log-text")).to_have_count(1, timeout=20_000)
        written.append(OUT / "step-panel.png")
        page.screenshot(path=written[-1])  # the panel; the fan-out's page below is long
    return fan_how


def shoot_failover(
    page: Any, base: str, kubeconfig: Path, wait_s: float, written: list[Path]
) -> None:
    """A failover, for real: the step's site stops being Ready while it runs."""
    from playwright.sync_api import expect

    failover_id = fail_over(page, base, kubeconfig, wait_s)
    page.goto(f"{base}/runs/{failover_id}/units/simulate/")
    expect(page.locator("#unit-logs:not([hx-trigger=load])")).to_have_count(1, timeout=20_000)
    written.append(OUT / "failover.png")
    page.screenshot(path=written[-1], full_page=True)


def start(argv: list[str], env: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--wait", type=float, default=120, help="seconds to wait for the demo run")
    ap.add_argument("--time-scale", type=float, default=40)
    args = ap.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is missing: apt-get install chromium (never `playwright install`)")
    var_dir = Path(tempfile.mkdtemp(prefix="portal-screenshots-"))
    env: dict[str, Any] = {
        **os.environ,
        "PORTAL_VAR_DIR": str(var_dir),
        "DEBUG": "1",
        # Finished step workflows (and their pods' logs) stay at the sites while we shoot.
        "PORTAL_KEEP_FINISHED_SECONDS": "900",
        # A lost site is failed over at the next resync, not after the production two minutes.
        "PORTAL_FAILOVER_GRACE_SECONDS": "5",
    }
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "KARMADA_KUBECONFIG"):
        env.pop(name, None)  # a fresh embedded demo, whatever the shell points at
    py = sys.executable
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # Our own sandbox fleet on a free port (run_demo's fixed port may be taken by another
        # demo); with KARMADA_KUBECONFIG set, run_demo uses it instead of starting one.
        sandbox_port = free_port()
        kubeconfig = var_dir / "kubeconfig"
        sandbox_argv = [py, "-m", "sandbox", "--port", str(sandbox_port)]
        sandbox_argv += ["--kubeconfig", str(kubeconfig), "--time-scale", str(args.time_scale)]
        if shutil.which("bwrap"):
            sandbox_argv.append("--execute")  # as run_demo: steps really run, logs are real
        procs.append(start(sandbox_argv, env, var_dir / "sandbox.log"))
        wait_http(f"http://127.0.0.1:{sandbox_port}/version", procs[-1], var_dir / "sandbox.log")
        # run_demo creates the repositories' credential Secrets only on a sandbox it starts
        # itself; without them every cross-site read waits for its Secret.
        sys.path.insert(0, str(ROOT))
        from placement.demo import create_credentials

        create_credentials(
            f"http://127.0.0.1:{sandbox_port}",
            env.get("KARMADA_NAMESPACE", "portal"),
            env.get("PORTAL_LABEL_DOMAIN", "portal.multisite.io"),
        )
        env["KARMADA_KUBECONFIG"] = str(kubeconfig)

        port = free_port()
        log = var_dir / "run_demo.log"
        procs.append(start([py, "manage.py", "run_demo", "--port", str(port)], env, log))
        wait_http(f"http://127.0.0.1:{port}/healthz", procs[-1], log)
        for path in shoot(f"http://127.0.0.1:{port}", var_dir, args.wait, kubeconfig):
            print(f"wrote {path.relative_to(ROOT)}")
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)  # run_demo stops everything it started
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        print(f"demo logs: {var_dir}")


if __name__ == "__main__":
    main()
