"""The web console in a real browser: Debian's chromium, headless, driven by
selenium through chromedriver. Every page loads without a script error or a
Content-Security-Policy violation, the charts move while a load generator
runs, a search finds one job among 1,000,000, an admin's action works from
its form and a monitor gets none. With FASTBEAN_SCREENSHOTS=1 the tests
save the screenshots docs/console.md shows (desktop and phone, light and
dark) into docs/console/."""
import os
import shutil
import socket
import threading
import time

import pytest

from tests.conftest import ROOT
from tests.support.consolekit import TOKENS, Http, Node, wait_for
from tests.support.servers import HOST

CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
SHOTS = os.path.join(ROOT, "docs", "console")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

webdriver = pytest.importorskip("selenium.webdriver")
if not os.path.exists(CHROMEDRIVER) or shutil.which("chromium") is None:
    pytest.skip("no chromium and chromedriver (apt-get install chromium chromium-driver)", allow_module_level=True)

from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.expected_conditions import staleness_of  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def new_driver(width=1280, height=900):
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=%d,%d" % (width, height)):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    return driver


@pytest.fixture(scope="module")
def driver():
    d = new_driver()
    yield d
    d.quit()


@pytest.fixture(scope="module")
def node():
    n = Node().start()
    n.ids = n.fill()
    yield n
    n.stop()


def problems(driver):
    """The browser's errors since last asked: script errors, failed loads, CSP violations."""
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" or "Content Security Policy" in e["message"]]


PAGES = ("/", "/tubes", "/tubes/emails", "/tubes/emails?state=reserved", "/tubes/emails?state=buried",
         "/search?q=ann", "/connections", "/dead", "/cluster")


def test_every_page_loads_without_errors(driver, node):
    problems(driver)
    for path in PAGES + ("/jobs/%d" % node.ids["ready"][0],):
        driver.get(node.url + path)
        wait_for(lambda: driver.execute_script("return document.readyState") == "complete")
        assert driver.find_element(By.TAG_NAME, "h1").text
        assert problems(driver) == [], path
    # the overview's script ran: its charts took the history
    driver.get(node.url + "/")
    wait_for(lambda: int(driver.find_element(By.ID, "charts").get_attribute("data-samples")) > 0,
             what="the charts' first samples")
    assert problems(driver) == []


def load(port, stop, batch=20):
    """Puts, reserves and deletes, batch at a time through one socket, until stop is set."""
    with socket.create_connection((HOST, port)) as s:
        f = s.makefile("rb")
        while not stop.is_set():
            s.sendall(b"put 0 0 60 5\r\nhello\r\nreserve\r\n" * batch)
            ids = []
            for _ in range(batch):
                f.readline()                        # INSERTED id
                ids.append(int(f.readline().split()[1]))    # RESERVED id 5
                f.readline()                        # its body
            s.sendall(b"".join(b"delete %d\r\n" % job_id for job_id in ids))
            for _ in range(batch):
                f.readline()


def test_charts_move_under_load(driver, node):
    driver.get(node.url + "/")
    canvas = driver.find_element(By.ID, "chart-rates")
    wait_for(lambda: canvas.get_attribute("data-last"), what="the first sample drawn")
    stop = threading.Event()
    worker = threading.Thread(target=load, args=(node.server.port, stop), daemon=True)
    worker.start()
    try:
        def puts():
            last = dict(kv.split("=") for kv in canvas.get_attribute("data-last").split())
            return int(last["puts"]) > 0 and int(last["deletes"]) > 0
        wait_for(puts, timeout=30, what="puts and deletes on the chart")
        before = driver.execute_script("return document.getElementById('chart-rates').toDataURL()")
        samples = int(driver.find_element(By.ID, "charts").get_attribute("data-samples"))
        wait_for(lambda: int(driver.find_element(By.ID, "charts").get_attribute("data-samples")) > samples,
                 what="another sample")
        after = driver.execute_script("return document.getElementById('chart-rates').toDataURL()")
        assert before != after
    finally:
        stop.set()
        worker.join(10)
    assert problems(driver) == []


def submit(driver, button):
    """Click a form's button and wait for the page it leads to."""
    page = driver.find_element(By.TAG_NAME, "html")
    button.click()
    WebDriverWait(driver, 20).until(staleness_of(page))
    wait_for(lambda: driver.execute_script("return document.readyState") == "complete")


def submit_form(driver, selector, fill=lambda form: None):
    """Fill the form `selector` and submit it; again if the page's live
    update replaced it meanwhile (chromium then says the node "does not
    belong to the document")."""
    for attempt in range(3):
        try:
            form = driver.find_element(By.CSS_SELECTOR, selector)
            fill(form)
            return submit(driver, form.find_element(By.TAG_NAME, "button"))
        except (StaleElementReferenceException, WebDriverException) as e:
            if attempt == 2 or not (isinstance(e, StaleElementReferenceException)
                                    or "does not belong to the document" in str(e)):
                raise


def flash(driver):
    found = driver.find_elements(By.CSS_SELECTOR, ".flash")
    return found[0].text if found else ""


def test_actions_from_the_page(driver, node):
    driver.get(node.url + "/tubes/emails")

    def ninety(form):
        seconds = form.find_element(By.NAME, "seconds")
        seconds.clear()
        seconds.send_keys("90")
    submit_form(driver, "form[action='/tubes/emails/pause']", ninety)
    assert "PAUSED" in flash(driver)
    assert node.client().stats_tube("emails")["pause"] == 90
    submit_form(driver, "form[action='/tubes/emails/resume']")
    assert "PAUSED" in flash(driver)
    assert node.client().stats_tube("emails")["pause"] == 0
    assert problems(driver) == []


def test_monitor_gets_no_action_in_the_page(tmp_path):
    n = Node(tokens_dir=tmp_path).start()
    d = new_driver()
    try:
        n.fill()
        d.get(n.url + "/tubes/emails")
        assert "/signin" in d.current_url
        d.find_element(By.NAME, "token").send_keys(TOKENS["mon"][0])
        submit(d, d.find_element(By.CSS_SELECTOR, "form.signin button"))
        wait_for(lambda: d.current_url.endswith("/tubes/emails"), what="the page asked for")
        assert "(read-only)" in d.find_element(By.CLASS_NAME, "who").text
        assert d.find_elements(By.ID, "tube-actions") == []
        # a form made up in the page, with the session's CSRF token, is refused by the server
        d.execute_script("""
            const f = document.createElement('form'); f.method = 'post'; f.action = '/tubes/emails/flush-tube';
            const t = document.createElement('input'); t.name = 'csrf';
            t.value = document.querySelector('meta[name=csrf-token]').content; f.appendChild(t);
            document.body.appendChild(f); f.submit();""")
        wait_for(lambda: d.find_elements(By.ID, "reason"), what="the refusal")
        assert "may not" in d.find_element(By.ID, "reason").text
        assert n.client().stats_tube("emails")["current-jobs-ready"] == 3
    finally:
        d.quit()
        n.stop()


MILLION = int(os.environ.get("FASTBEAN_CONSOLE_JOBS", "1000000"))


def put_pipelined(port, count, tube=b"haystack", chunk=20000):
    """count jobs of distinct bodies into tube through one socket, pipelined; the last holds the needle."""
    with socket.create_connection((HOST, port)) as s:
        s.sendall(b"use %s\r\n" % tube)
        f = s.makefile("rb")
        f.readline()
        done = 0
        while done < count:
            n = min(chunk, count - done)
            s.sendall(b"".join(b"put 0 0 60 12\r\nhay-%08d\r\n" % (done + i) for i in range(n)))
            for _ in range(n):
                f.readline()
            done += n
        s.sendall(b"put 0 0 60 16\r\nthe-needle-42424\r\n")
        return int(f.readline().split()[1])


@pytest.mark.timeout(600)
def test_search_finds_one_job_among_a_million(driver, node):
    needle = put_pipelined(node.server.port, MILLION)
    driver.get(node.url + "/search")
    box = driver.find_element(By.NAME, "q")
    box.send_keys("needle-4242")
    submit(driver, driver.find_element(By.CSS_SELECTOR, "#search-form button"))
    wait_for(lambda: driver.find_element(By.ID, "search-status").get_attribute("data-state") != "running",
             timeout=120, what="the search's end")
    assert driver.find_element(By.ID, "search-status").get_attribute("data-state") == "done"
    links = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#results a[href^='/jobs/']")]
    assert links == [str(needle)]
    summary = driver.find_element(By.ID, "search-summary").text
    assert "1 match" in summary
    assert int(summary.split(" of ")[1].split()[0]) > MILLION, summary
    # the beanstalk port answered throughout
    c = node.client()
    assert c.stats()["current-jobs-ready"] >= MILLION
    c.cmd(b"flush-tube haystack")
    assert problems(driver) == []


# what docs/console.md shows: (width, height, size, scheme, pages)
SHOT_SETS = ((1280, 860, "desktop", "light", ("overview", "tubes", "tube", "job", "search", "connections",
                                              "dead")),
             (1280, 860, "desktop", "dark", ("overview", "job")),
             (390, 844, "phone", "light", ("overview", "tube")),
             (390, 844, "phone", "dark", ("overview",)))


@pytest.mark.skipif(not os.environ.get("FASTBEAN_SCREENSHOTS"), reason="FASTBEAN_SCREENSHOTS=1 saves them")
def test_screenshots(node):
    os.makedirs(SHOTS, exist_ok=True)
    c = node.client()
    for i in range(40):
        c.use("mail-%02d" % i)
        for _ in range(i % 7):
            c.put(b'{"user": %d, "template": "welcome"}' % i)
    c.use("webhooks")
    c.retry_limit(1, "webhooks-dead")
    c.watch("webhooks")
    for i in range(4):
        c.put(b'{"url": "https://example.com/hook/%d", "attempt": 1}' % i)
        job_id, _ = c.job(b"reserve-with-timeout 1")
        c.cmd(b"release %d 0 0" % job_id, b"RELEASED")
    c.close()
    stop = threading.Event()
    worker = threading.Thread(target=load, args=(node.server.port, stop), daemon=True)
    worker.start()
    paths = {"overview": "/", "tubes": "/tubes?sort=ready&dir=desc", "tube": "/tubes/emails",
             "job": "/jobs/%d" % node.ids["ready"][0], "search": "/search?q=ann", "connections": "/connections",
             "dead": "/dead?tube=webhooks-dead"}
    try:
        for width, height, size, scheme, names in SHOT_SETS:
            d = new_driver(width, height)
            try:
                if size == "phone":     # headless windows are at least 500 px wide: a phone's viewport
                    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": True})
                d.execute_cdp_cmd("Emulation.setEmulatedMedia", {
                    "media": "", "features": [{"name": "prefers-color-scheme", "value": scheme}]})
                for name in names:
                    d.get(node.url + paths[name])
                    if name == "overview":
                        wait_for(lambda d=d: int(d.find_element(By.ID, "charts").get_attribute("data-samples")) > 5,
                                 timeout=30)
                    time.sleep(0.5)         # the search's first poll, the fonts
                    d.save_screenshot(os.path.join(SHOTS, "%s-%s-%s.png" % (name, size, scheme)))
            finally:
                d.quit()
    finally:
        stop.set()
        worker.join(10)


def test_console_survives_a_failover(driver, tmp_path):
    from tests.support.hanodes import Node as HaNode
    from tests.support.hanodes import find_primary
    from tests.support.natscluster import NATS_SERVER, NatsCluster
    if not os.path.exists(NATS_SERVER):
        pytest.skip("no nats-server (%s)" % NATS_SERVER)
    from tests.support.servers import free_port
    cluster = NatsCluster(tmp_path / "nats")
    nodes = []
    try:
        for name in ("a", "b"):
            port = free_port()
            node = HaNode(name, cluster.urls, tmp_path, "--lease-ttl", "2", "--console", "%s:%d" % (HOST, port))
            node.console = "http://%s:%d" % (HOST, port)
            nodes.append(node)
        primary = find_primary(nodes)
        standby = [n for n in nodes if n is not primary][0]
        with primary.client() as c:
            c.use("survivor")
            c.put(b"still here")
        driver.get(standby.console + "/cluster")
        wait_for(lambda: driver.find_element(By.ID, "primary").text == primary.name,
                 what="the standby naming the primary")
        assert driver.find_element(By.ID, "lag").text.endswith(("message", "messages"))

        def nodes_shown(console):
            # every node's role as the page lists it, the page read again
            driver.get(console + "/cluster")
            return {row.get_attribute("data-node"): row.get_attribute("data-role")
                    for row in driver.find_elements(By.CSS_SELECTOR, "#nodes tr.node")}

        wait_for(lambda: nodes_shown(standby.console) == {primary.name: "primary", standby.name: "standby"},
                 what="the standby's page listing both nodes")
        link = driver.find_element(By.CSS_SELECTOR, '#nodes tr[data-node="%s"] a' % primary.name)
        assert link.get_attribute("href") == primary.console + "/"
        driver.get(primary.console + "/cluster")
        assert "primary" in driver.find_element(By.ID, "replication").text
        # a standby changes nothing: its engine follows the stream
        http = Http(standby.console)
        r = http.post("/tubes/survivor/pause", {"seconds": "10"})
        assert r.status == 409 and "not the primary" in r.text
        primary.kill()
        new = find_primary(nodes, exclude=(primary,))
        assert new is standby
        for path in ("/", "/tubes", "/tubes/survivor", "/cluster"):
            driver.get(new.console + path)
            assert driver.find_element(By.TAG_NAME, "h1").text
        driver.get(new.console + "/tubes")
        assert "survivor" in driver.find_element(By.ID, "tubes").text
        driver.get(new.console + "/cluster")
        wait_for(lambda: driver.find_element(By.ID, "primary").text == new.name, what="the new primary")
        # the killed node leaves the table once the lease TTL (2 s) passes
        wait_for(lambda: nodes_shown(new.console) == {new.name: "primary"}, what="the new primary alone")
        assert problems(driver) == []
    finally:
        for n in nodes:
            n.stop()
        cluster.stop()
