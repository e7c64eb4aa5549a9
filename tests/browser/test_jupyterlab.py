"""JupyterLab itself, through its UI: `make lab`'s server on a free port with a token, the index
notebook opened, a chapter notebook opened from its link and run with Run -> Run All Cells,
no error output, then the server stopped cleanly (kernels included).

The server command is the one `make lab` runs (read with `make -n lab`), with a port, a token and
no browser added. It serves a temporary copy of chapters/, so JupyterLab's autosave cannot
touch the stored outputs; its settings, workspaces and runtime files are kept there too.
"""
from __future__ import annotations

import os
import secrets
import shlex
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from waits import WAIT_S

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "15_2_1_ttft_itl.ipynb"     # the chapter notebook run through the UI
RUN_ALL_TIMEOUT_S = 420


def make_lab_command() -> list[str]:
    out = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.splitlines() if " lab " in f" {line} " and "jupyter" in line]
    assert lines, f"`make -n lab` shows no jupyter lab command:\n{out}"
    return shlex.split(lines[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.5):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


@pytest.fixture
def lab_server(tmp_path):
    root = tmp_path / "lab"
    (root / "chapters").mkdir(parents=True)
    for nb in (ROOT / "chapters").glob("*.ipynb"):
        shutil.copy2(nb, root / "chapters" / nb.name)
    # `make lab` opens the reader version (solutions emptied): build it the way the Makefile does
    subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "inferlab.exercises", "build-student",
                    *sorted(str(p) for p in (root / "chapters").glob("*.ipynb")), "--out", str(root / "reader")],
                   check=True, capture_output=True, timeout=300)
    port, token = free_port(), secrets.token_hex(16)
    cmd = make_lab_command()
    assert "--ServerApp.root_dir=." in cmd and "--ip=127.0.0.1" in cmd, cmd
    cmd = [str(ROOT / c) if c.startswith(".venv/") else c for c in cmd]
    cmd = [f"--ServerApp.root_dir={root}" if c == "--ServerApp.root_dir=." else c for c in cmd]
    cmd += [f"--port={port}", "--port-retries=0", "--no-browser", f"--IdentityProvider.token={token}",
            "--expose-app-in-browser", f"--LabApp.user_settings_dir={tmp_path / 'settings'}",
            f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}"]
    runtime = tmp_path / "runtime"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime))
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def api(path: str, method: str = "GET"):
        req = urllib.request.Request(base + path, method=method, headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status

    def up():
        if proc.poll() is not None:
            pytest.fail(f"jupyter lab exited with {proc.returncode}: {(tmp_path / 'server.log').read_text()[-2000:]}")
        try:
            return api("/api/status") == 200
        except (urllib.error.URLError, OSError):
            return False

    try:
        wait_until(up, 90, "the JupyterLab server to answer")
        yield {"base": base, "token": token, "api": api, "proc": proc, "runtime": runtime,
               "log": tmp_path / "server.log"}
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


CURRENT = """
const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
if (!w || !w.context || !w.content || !w.content.model || !w.context.isReady) return null;
const s = w.sessionContext.session;
const cells = [];
const list = w.content.model.cells;
for (let i = 0; i < list.length; i++) {
  const c = list.get(i);
  if (c.type !== 'code') continue;
  const outs = c.outputs.toJSON();
  cells.push({count: c.executionCount,
              errors: outs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue)});
}
return {path: w.context.path, kernel: s && s.kernel ? s.kernel.status : null, cells: cells};
"""


def test_run_all_cells_of_a_chapter_through_the_jupyterlab_ui(driver, lab_server):
    from selenium.webdriver.common.by import By

    driver.execute_cdp_cmd("Network.enable", {})   # the book's tests switched the network off
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    driver.set_window_size(1400, 1000)
    driver.get(f"{lab_server['base']}/lab/tree/reader/00_index.ipynb?token={lab_server['token']}")
    index = wait_until(lambda: (lambda s: s if s and s["path"] == "reader/00_index.ipynb" else None)(
        driver.execute_script(CURRENT)), 120, "the index notebook to open")
    assert len(index["cells"]) >= 2, index
    # JupyterLab shows a relative link as /files/<path>; a click opens the notebook in a new tab
    link = wait_until(lambda: driver.find_elements(
        By.CSS_SELECTOR, f'.jp-RenderedMarkdown a[href*="/files/reader/{CHAPTER}"]'), 60, f"the link to {CHAPTER}")
    link[0].click()
    wait_until(lambda: (lambda s: s and s["path"] == f"reader/{CHAPTER}" and s["kernel"] == "idle")(
        driver.execute_script(CURRENT)), 120, f"{CHAPTER} to open with an idle kernel")
    before = driver.execute_script(CURRENT)
    assert before["cells"] and all(not c["errors"] for c in before["cells"])

    # Run -> Run All Cells, through the menu bar
    menu = wait_until(lambda: [e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel")
                               if e.text == "Run"], WAIT_S, "the Run menu in the menu bar")
    menu[0].click()
    item = wait_until(lambda: driver.find_elements(
        By.CSS_SELECTOR, 'li.lm-Menu-item[data-command="runmenu:run-all"]'), WAIT_S, "Run All Cells in the Run menu")
    assert "Run All Cells" in item[0].text, item[0].text
    item[0].click()

    # the run has started once a cell is queued or running (its count cleared) or the kernel is busy;
    # until then the counts on screen are the stored ones
    wait_until(lambda: (lambda s: s["kernel"] == "busy" or any(c["count"] is None for c in s["cells"]))(
        driver.execute_script(CURRENT)), WAIT_S, "Run All to start", interval_s=0.1)

    def finished():
        s = driver.execute_script(CURRENT)
        if any(c["errors"] for c in s["cells"]):
            return s
        counts = [c["count"] for c in s["cells"] if c["count"] is not None]
        if s["kernel"] == "idle" and len(counts) == len(s["cells"]) and \
                sorted(counts) == list(range(min(counts), min(counts) + len(counts))):
            return s
        return None

    t0 = time.monotonic()
    state = wait_until(finished, RUN_ALL_TIMEOUT_S, f"Run All of {CHAPTER}", interval_s=1.0)
    errors = [e for c in state["cells"] for e in c["errors"]]
    assert errors == [], errors
    # every code cell ran in this session, in order (fresh counts, none left from the stored file)
    assert [c["count"] for c in state["cells"]] == sorted(c["count"] for c in state["cells"])
    print(f"Run All of {CHAPTER}: {len(state['cells'])} code cells in {time.monotonic() - t0:.0f} s")

    # stop cleanly: the server's shutdown API, then no process left using its runtime folder
    proc = lab_server["proc"]
    assert lab_server["api"]("/api/shutdown", method="POST") == 200
    assert proc.wait(60) == 0
    wait_until(lambda: not processes_mentioning(str(lab_server["runtime"])), 30, "the kernels to exit")
