"""The dashboard in a real browser (Debian's chromium, headless, through chromedriver)
against a real server on the embedded store. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import pathlib
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from testbed.processes import RedisServer, ServiceProcess
from testbed.receiver import receiver
from tests.helpers.keystone import TOKENLESS_ONLY

pytestmark = pytest.mark.functional

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip(
        "chromium and chromedriver are needed (Debian: apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402 - after the skip

ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    # Delays up to a week, so the schedule's windows all hold messages.
    conf = tmp_path_factory.mktemp("dashboard") / "zaqar-delay.conf"
    conf.write_text("[transport]\nmax_message_delay = 604800\n")
    service = ServiceProcess(args=["--config-file", str(conf)]).start()
    yield service
    service.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def api(server: ServiceProcess, project: str) -> Callable[..., requests.Response]:
    headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": project}

    def call(method: str, path: str, **kwargs: Any) -> requests.Response:
        sent = {**headers, **kwargs.pop("headers", {})}
        return requests.request(method, server.url + path, headers=sent, timeout=10, **kwargs)

    return call


def wait_for(check: Callable[[], Any], what: str, timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except Exception:  # noqa: BLE001 - the page is still drawing
            found = None
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"the page never showed {what}")


def screenshot(browser: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"dashboard-{name}.png"))


def text_of(browser: Any, selector: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, selector).text)


def test_the_queue_list_shows_each_queue_with_its_counts(
    server: ServiceProcess, browser: Any
) -> None:
    project = f"list-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    assert call("PUT", "/v2/queues/dead", json={}).status_code == 201
    meta = {"_default_message_delay": 3600, "_dead_letter_queue": "dead"}
    assert call("PUT", "/v2/queues/reminders", json=meta).status_code == 201
    messages = [{"body": {"n": n}, "ttl": 86400} for n in range(5)]
    assert call("POST", "/v2/queues/reminders/messages", json={"messages": messages}).ok
    browser.get(f"{server.url}/dashboard/?project={project}")
    row = wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="reminders"]'), "the row"
    )
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    screenshot(browser, "queues")
    assert cells[0] == "reminders"
    assert cells[1:4] == ["5", "0", "5"]  # free (unclaimed, as Zaqar counts), claimed, delayed
    assert "in " in cells[4]  # next due, an hour ahead
    assert cells[5] == "dead"
    assert browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="dead"]')


def test_topics_are_listed_beside_queues_with_their_counts(
    server: ServiceProcess, browser: Any
) -> None:
    project = f"topics-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    assert call("PUT", "/v2/queues/alerts", json={}).status_code == 201
    assert call("PUT", "/v2/topics/alerts", json={"_default_message_delay": 3600}).ok
    messages = [{"body": {"n": n}, "ttl": 86400} for n in range(3)]
    assert call("POST", "/v2/topics/alerts/messages", json={"messages": messages}).ok
    subscriber = {"subscriber": "mailto:ops@example.com", "ttl": 3600}
    assert call("POST", "/v2/topics/alerts/subscriptions", json=subscriber).status_code == 201
    browser.get(f"{server.url}/dashboard/?project={project}")
    row = wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, 'tr[data-topic="alerts"]'), "the topic"
    )
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:3] == ["alerts", "3", "3"] and cells[4] == "1"
    assert cells[3].endswith("(in 60 min)"), cells  # due an hour after the post
    # The queue of the same name is its own row, empty.
    queue = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="alerts"]')
    assert [c.text for c in queue.find_elements(By.TAG_NAME, "td")][1] == "0"
    screenshot(browser, "topics")


def test_a_queue_shows_its_schedule_and_cancels_and_reschedules(
    server: ServiceProcess, browser: Any
) -> None:
    project = f"one-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    now_ms = int(time.time() * 1000)
    dues = [now_ms + minutes * 60_000 for minutes in (5, 10, 90, 330, 630)]
    posted = call(
        "POST",
        "/v2/queues/jobs/messages",
        json={"messages": [{"body": {"job": i}, "deliver_at": d} for i, d in enumerate(dues)]},
    )
    first = posted.json()["resources"][0].rsplit("/", 1)[1]
    second = posted.json()["resources"][1].rsplit("/", 1)[1]
    browser.get(f"{server.url}/dashboard/?project={project}#/queue/jobs/day")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "tr[data-message]"), "messages")
    counts = [
        int(bar.get_attribute("data-count"))
        for bar in browser.find_elements(By.CSS_SELECTOR, "#histogram .bar")
    ]
    assert len(counts) == 24 and sum(counts) == 5
    heights = [b.size["height"] for b in browser.find_elements(By.CSS_SELECTOR, "#histogram .bar")]
    assert max(heights) > 100 and heights[1] == pytest.approx(max(heights) / 2, abs=2)
    # Bins of an hour: 5 and 10 min in the first, 90 min in the second, 5.5 h, 10.5 h.
    assert [counts[i] for i in (0, 1, 5, 10)] == [2, 1, 1, 1]
    rows = [
        r.get_attribute("data-message")
        for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-message]")
    ]
    assert rows[:2] == [first, second]  # due order
    screenshot(browser, "queue")

    # Cancel the first one: confirmed, then gone from the page and from the store.
    browser.find_element(By.CSS_SELECTOR, f'tr[data-message="{first}"] button.cancel').click()
    browser.switch_to.alert.accept()
    wait_for(
        lambda: not browser.find_elements(By.CSS_SELECTOR, f'tr[data-message="{first}"]'),
        "the cancelled message gone",
    )
    assert call("GET", f"/v2/queues/jobs/messages/{first}").status_code == 404

    # Reschedule the second one to 2 hours from now.
    browser.find_element(By.CSS_SELECTOR, f'tr[data-message="{second}"] button.reschedule').click()
    prompt = browser.switch_to.alert
    prompt.send_keys("7200")
    prompt.accept()
    browser.switch_to.alert.accept()  # the confirmation

    def moved() -> bool:
        due = call("GET", f"/v2/queues/jobs/messages/{second}?with_schedule=true").json()["due"]
        return abs(_epoch_ms(due) - (time.time() * 1000 + 7_200_000)) < 60_000

    wait_for(moved, "the message rescheduled")


def _epoch_ms(rfc3339: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000


def test_an_auditor_edits_a_scheduled_message_s_body(server: ServiceProcess, browser: Any) -> None:
    project = f"edit-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    due_ms = int(time.time() * 1000) + 600_000
    posted = call(
        "POST",
        "/v2/queues/jobs/messages",
        json={"messages": [{"body": {"amount": 100}, "deliver_at": due_ms}]},
    )
    mid = posted.json()["resources"][0].rsplit("/", 1)[1]
    before = call("GET", f"/v2/queues/jobs/messages/{mid}?with_schedule=true").json()
    browser.get(f"{server.url}/dashboard/?project={project}#/queue/jobs/hour")
    button = wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, f'tr[data-message="{mid}"] button.edit'),
        "the message",
    )
    button.click()
    prompt = browser.switch_to.alert
    assert prompt.text == "New body (JSON):"
    prompt.send_keys('{"amount": 90}')
    prompt.accept()
    browser.switch_to.alert.accept()  # the confirmation

    def edited() -> Any:
        found = call("GET", f"/v2/queues/jobs/messages/{mid}?with_schedule=true").json()
        return found if found["body"] == {"amount": 90} else None

    after = wait_for(edited, "the message edited")
    assert (after["due"], after["ttl"]) == (before["due"], before["ttl"])
    wait_for(
        lambda: '"amount":90' in text_of(browser, f'tr[data-message="{mid}"]').replace(" ", ""),
        "the edited body shown",
    )


def test_bad_input_shows_the_api_error_text(server: ServiceProcess, browser: Any) -> None:
    project = f"bad-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    [mid] = [
        h.rsplit("/", 1)[1]
        for h in call(
            "POST",
            "/v2/queues/jobs/messages",
            json={"messages": [{"body": 1, "deliver_at": int(time.time() * 1000) + 600_000}]},
        ).json()["resources"]
    ]
    browser.get(f"{server.url}/dashboard/?project={project}#/queue/jobs/hour")
    button = wait_for(
        lambda: browser.find_element(
            By.CSS_SELECTOR, f'tr[data-message="{mid}"] button.reschedule'
        ),
        "the message",
    )
    button.click()
    prompt = browser.switch_to.alert
    prompt.send_keys("not a time")
    prompt.accept()
    browser.switch_to.alert.accept()
    error = wait_for(lambda: browser.find_element(By.ID, "error").text, "an error")
    screenshot(browser, "error")
    assert error.startswith("Invalid") or "deliver_at" in error, error
    assert browser.find_element(By.CSS_SELECTOR, f'tr[data-message="{mid}"]')  # still there


def test_purge_empties_the_queue(server: ServiceProcess, browser: Any) -> None:
    project = f"purge-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    assert call("POST", "/v2/queues/jobs/messages", json={"messages": [{"body": 1}] * 3}).ok
    browser.get(f"{server.url}/dashboard/?project={project}#/queue/jobs/hour")
    wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, 'div[data-stat="total"] b').text == "3", "3"
    )
    browser.find_element(By.CSS_SELECTOR, "button.purge").click()
    browser.switch_to.alert.accept()
    wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, 'div[data-stat="total"] b').text == "0", "0"
    )
    assert call("GET", "/v2/queues/jobs/stats").json()["messages"]["total"] == 0


def test_the_service_view_draws_the_metrics_histograms(
    server: ServiceProcess, browser: Any
) -> None:
    call = api(server, "svc")
    assert call("POST", "/v2/queues/jobs/messages", json={"messages": [{"body": 1}]}).ok
    assert call("POST", "/v2/queues/jobs/claims", json={"ttl": 60}).status_code == 201
    browser.get(f"{server.url}/dashboard/?project=svc#/service")
    bars = wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, "#claim-lateness .bar"), "lateness bars"
    )
    assert sum(int(b.get_attribute("data-count")) for b in bars) >= 1
    first = text_of(browser, "#updated")
    wait_for(lambda: text_of(browser, "#updated") != first, "a refresh", timeout=12)
    screenshot(browser, "service")


def test_the_page_is_served_without_credentials_and_may_not_be_framed(
    server: ServiceProcess,
) -> None:
    page = requests.get(f"{server.url}/dashboard/", timeout=10)
    assert page.status_code == 200 and "dashboard.js" in page.text
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    missing = requests.get(f"{server.url}/dashboard/nothing", timeout=10)
    assert missing.status_code == 404 and set(missing.json()) == {"title", "description"}
    posted = requests.post(f"{server.url}/dashboard/", timeout=10)
    assert posted.status_code == 405 and posted.headers["Allow"] == "GET, HEAD"
    assert set(posted.json()) == {"title", "description"}
    moved = requests.get(f"{server.url}/dashboard", timeout=10, allow_redirects=False)
    assert moved.status_code == 301 and moved.headers["Location"] == "/dashboard/"


def test_in_keystone_mode_nothing_is_shown_without_a_token(
    browser: Any, tmp_path: pathlib.Path
) -> None:
    conf = tmp_path / "keystone.conf"
    conf.write_text("[server]\nauth_strategy = keystone\n" + TOKENLESS_ONLY)
    service = ServiceProcess(args=["--config-file", str(conf)]).start()
    try:
        headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "p"}
        refused = requests.get(f"{service.url}/v2/queues", headers=headers, timeout=10)
        assert refused.status_code == 401  # the server does ask for a token
        browser.get(f"{service.url}/dashboard/?project=p")
        asked = wait_for(lambda: browser.find_element(By.ID, "need-token"), "the token prompt")
        screenshot(browser, "keystone-no-token")
        assert "Keystone token" in asked.text
        assert browser.find_element(By.ID, "token-field").is_displayed()
        assert not browser.find_elements(By.CSS_SELECTOR, "table, tr[data-queue]")
    finally:
        service.stop()


def test_a_queue_shows_its_claimed_and_dead_lettered_messages(
    server: ServiceProcess, browser: Any
) -> None:
    project = f"held-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    assert call("PUT", "/v2/queues/work", json={"_dead_letter_queue": "work-dead"}).ok
    assert call("POST", "/v2/queues/work/messages", json={"messages": [{"body": 1}] * 3}).ok
    claimed = call("POST", "/v2/queues/work/claims?limit=2", json={"ttl": 300, "grace": 60})
    held = sorted(m["href"].split("/")[-1].split("?")[0] for m in claimed.json()["messages"])
    dead = call("POST", "/v2/queues/work-dead/messages", json={"messages": [{"body": "gave up"}]})
    dead_id = dead.json()["resources"][0].rsplit("/", 1)[1]
    browser.get(f"{server.url}/dashboard/?project={project}#/queue/work/hour")
    rows = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "tr[data-claimed]"), "claims")
    screenshot(browser, "claimed")
    assert sorted(r.get_attribute("data-claimed") for r in rows) == held
    for row in rows:
        assert row.find_element(By.CSS_SELECTOR, ".claim-count").text == "1"
        assert row.find_element(By.CSS_SELECTOR, ".claim-age").text.endswith(" s")
    [dead_row] = browser.find_elements(By.CSS_SELECTOR, "tr[data-dead]")
    assert dead_row.get_attribute("data-dead") == dead_id
    assert not browser.find_elements(By.CSS_SELECTOR, "tr[data-subscription]")


def test_a_queue_shows_its_push_subscriptions(server: ServiceProcess, browser: Any) -> None:
    project = f"subs-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    with receiver(statuses=[503]) as hook:
        subscription = {"subscriber": hook.url, "ttl": 3600}
        made = call("POST", "/v2/queues/jobs/subscriptions", json=subscription)
        assert made.status_code == 201, made.text
        sid = made.json()["subscription_id"]
        assert call("POST", "/v2/queues/jobs/messages", json={"messages": [{"body": 1}]}).ok
        hook.wait_for(1)

        def recorded() -> Any:
            shown = call("GET", f"/v2/queues/jobs/subscriptions/{sid}").json()
            return shown.get("last_delivery")

        wait_for(recorded, "the attempt recorded")
        browser.get(f"{server.url}/dashboard/?project={project}#/queue/jobs/hour")
        [row] = wait_for(
            lambda: browser.find_elements(By.CSS_SELECTOR, "tr[data-subscription]"),
            "the subscription",
        )
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        screenshot(browser, "subscriptions")
        assert cells[0] == hook.url and cells[3] == "60 min"
        # The 503, or, if the retry went out already, its 200.
        assert cells[4].startswith(("retry (HTTP 503)", "delivered")), cells[4]


def test_a_queue_shows_its_schedules_and_pauses_resumes_and_runs_them(
    server: ServiceProcess, browser: Any
) -> None:
    project = f"sched-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    daily = {
        "cron": "0 9 * * *",
        "timezone": "Europe/Paris",
        "message": {"body": {"remind": "stand-up"}},
    }
    assert call("PUT", "/v2/queues/team/schedules/standup", json=daily).status_code == 201
    browser.get(f"{server.url}/dashboard/?project={project}#/queue/team/hour")

    def row() -> Any:
        return browser.find_element(By.CSS_SELECTOR, 'tr[data-schedule="standup"]')

    def click(button: str) -> bool:
        # The page draws itself again after each action: a row found before may be gone.
        row().find_element(By.CSS_SELECTOR, button).click()
        return True

    cells = wait_for(lambda: [c.text for c in row().find_elements(By.TAG_NAME, "td")], "it")
    screenshot(browser, "schedules")
    assert cells[:2] == ["standup", "0 9 * * * (Europe/Paris)"]
    first_next = call("GET", "/v2/queues/team/schedules/standup").json()["next"][0]
    assert cells[2].startswith(first_next[:16].replace("T", " ")), cells[2]
    assert cells[4] == "0"

    wait_for(lambda: click("button.pause"), "the pause button")
    browser.switch_to.alert.accept()
    wait_for(lambda: call("GET", "/v2/queues/team/schedules/standup").json()["paused"], "paused")
    wait_for(lambda: "paused" in row().text, "the row paused")
    wait_for(lambda: click("button.pause"), "the resume button")
    browser.switch_to.alert.accept()
    wait_for(
        lambda: not call("GET", "/v2/queues/team/schedules/standup").json()["paused"], "resumed"
    )
    wait_for(lambda: "paused" not in row().text, "the row resumed")
    wait_for(lambda: click("button.run"), "the run button")
    browser.switch_to.alert.accept()
    listed = lambda: call("GET", "/v2/queues/team/messages?echo=true").json()["messages"]  # noqa: E731
    [posted] = wait_for(listed, "the message run now")
    assert posted["body"] == {"remind": "stand-up"}


@pytest.fixture
def small_quota_server(tmp_path: pathlib.Path) -> Iterator[ServiceProcess]:
    """A server whose projects may hold 2 messages."""
    conf = tmp_path / "zaqar-delay.conf"
    conf.write_text("[transport]\nmax_messages_per_project = 2\n")
    service = ServiceProcess(args=["--config-file", str(conf)]).start()
    yield service
    service.stop()


def test_a_schedule_whose_fires_fail_shows_why(
    small_quota_server: ServiceProcess, browser: Any
) -> None:
    server = small_quota_server
    project = f"failing-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    full = {"messages": [{"body": n} for n in range(2)]}
    assert call("POST", "/v2/queues/team/messages", json=full).status_code == 201
    big = {"every": 1, "message": {"body": {"pad": "x" * 100}}}
    assert call("PUT", "/v2/queues/team/schedules/big", json=big).status_code == 201
    error = wait_for(
        lambda: call("GET", "/v2/queues/team/schedules/big").json()["last_error"],
        "a fire refused",
    )
    assert call("GET", "/v2/queues/team/schedules/big").json()["fires"] == 0
    browser.get(f"{server.url}/dashboard/?project={project}#/queue/team/hour")
    cell = wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, 'tr[data-schedule="big"] td.last-fire'),
        "the schedule's row",
    )
    assert cell.text.startswith("failing for "), cell.text
    assert error["description"] in cell.text
    failing = cell.find_element(By.CSS_SELECTOR, ".failing")
    assert failing.get_attribute("title") == error["title"]


def test_dead_lettered_messages_move_back_to_their_queue(
    server: ServiceProcess, browser: Any
) -> None:
    project = f"back-{uuid.uuid4().hex[:6]}"
    call = api(server, project)
    assert call("PUT", "/v2/queues/orders", json={"_dead_letter_queue": "orders-dead"}).ok
    bodies = [{"order": n} for n in range(3)]
    posted = call(
        "POST", "/v2/queues/orders-dead/messages", json={"messages": [{"body": b} for b in bodies]}
    )
    first = posted.json()["resources"][0].rsplit("/", 1)[1]
    browser.get(f"{server.url}/dashboard/?project={project}#/queue/orders/hour")
    button = wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, f'tr[data-dead="{first}"] .move-back'),
        "the dead letter",
    )
    button.click()
    browser.switch_to.alert.accept()
    wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "tr[data-dead]")) == 2, "one moved")
    browser.find_element(By.CSS_SELECTOR, ".move-all-back").click()
    browser.switch_to.alert.accept()
    wait_for(lambda: not browser.find_elements(By.CSS_SELECTOR, "tr[data-dead]"), "all moved")
    screenshot(browser, "moved-back")

    def bodies_in(queue: str) -> list[Any]:
        listed = call("GET", f"/v2/queues/{queue}/messages?echo=true&include_claimed=true")
        return [] if listed.status_code == 204 else [m["body"] for m in listed.json()["messages"]]

    assert sorted(b["order"] for b in bodies_in("orders")) == [0, 1, 2]  # each once
    assert bodies_in("orders-dead") == []


@pytest.fixture
def keystone_server(tmp_path: pathlib.Path, embedded_redis: Any) -> Iterator[tuple[str, Any]]:
    """The app in keystone mode on a loopback port, served in this process so that
    keystonemiddleware's AuthTokenFixture answers for the tokens a test registers."""
    import threading
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from keystonemiddleware.fixture import AuthTokenFixture

    from tests.helpers.stores import close_test_driver, open_test_driver
    from zaqar_delay.api.app import create_wsgi_app
    from zaqar_delay.conf import load_settings

    conf = tmp_path / "keystone.conf"
    conf.write_text(
        "[server]\nauth_strategy = keystone\n"
        "[keystone_authtoken]\nwww_authenticate_uri = http://127.0.0.1:5000/v3\n"
        "delay_auth_decision = false\n"
    )
    driver = open_test_driver(str(embedded_redis.uri))
    tokens = AuthTokenFixture()
    tokens.setUp()

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    httpd = make_server(
        "127.0.0.1",
        0,
        create_wsgi_app(load_settings([str(conf)]), driver=driver),
        handler_class=Quiet,
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", tokens
    finally:
        httpd.shutdown()
        httpd.server_close()
        tokens.cleanUp()
        close_test_driver(driver)


def test_in_keystone_mode_a_token_shows_its_own_projects_queues(
    browser: Any, keystone_server: tuple[str, Any]
) -> None:
    url, tokens = keystone_server
    tokens_by_project = {}
    for project in ("alice", "bob"):
        tokens_by_project[project] = uuid.uuid4().hex
        tokens.add_token_data(
            token_id=tokens_by_project[project],
            project_id=project,
            user_id=f"u-{project}",
            role_list=["member", "reader"],
        )
        headers = {"Client-ID": str(uuid.uuid4()), "X-Auth-Token": tokens_by_project[project]}
        created = requests.put(f"{url}/v2/queues/{project}-q", json={}, headers=headers, timeout=10)
        assert created.status_code == 201
    browser.get(f"{url}/dashboard/?project=bob")  # the header it sends loses to the token
    wait_for(lambda: browser.find_element(By.ID, "need-token"), "the token prompt")
    browser.find_element(By.ID, "token").send_keys(tokens_by_project["alice"])
    browser.find_element(By.CSS_SELECTOR, "#identity button").click()
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "tr[data-queue]"), "the queues")
    screenshot(browser, "keystone-token")
    shown = [
        r.get_attribute("data-queue")
        for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-queue]")
    ]
    assert shown == ["alice-q"]
    browser.execute_script("sessionStorage.clear()")


def test_an_admin_sees_pools_flavors_and_where_each_queue_lives(
    tmp_path: pathlib.Path, redis_server: RedisServer, browser: Any
) -> None:
    conf = tmp_path / "zaqar-delay.conf"
    conf.write_text("[DEFAULT]\npooling = true\nadmin_mode = true\n")
    pooled = ServiceProcess(args=["--config-file", str(conf)]).start()
    try:
        project = f"pools-{uuid.uuid4().hex[:6]}"
        call = api(pooled, project)
        prefix = f"t{uuid.uuid4().hex[:12]}"
        pool = {"uri": redis_server.url, "weight": 10, "options": {"key_prefix": prefix}}
        assert call("PUT", "/v2/pools/hot", json=pool).status_code == 201
        assert call("PUT", "/v2/flavors/fast", json={"pool_list": ["hot"]}).status_code == 201
        for queue in ("alpha", "beta"):
            created = call("PUT", f"/v2/queues/{queue}", json={"_flavor": "fast"})
            assert created.status_code == 201, created.text
        browser.get(f"{pooled.url}/dashboard/?project={project}")
        link = wait_for(
            lambda: (
                browser.find_element(By.ID, "pools-link").is_displayed()
                and browser.find_element(By.ID, "pools-link")
            ),
            "the Pools link",
        )
        link.click()
        row = wait_for(
            lambda: browser.find_element(By.CSS_SELECTOR, 'tr[data-pool="hot"]'), "the pool"
        )
        screenshot(browser, "pools")
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        assert cells == ["hot", "redis", "10", "fast", "2"]
        assert prefix not in browser.page_source and redis_server.url not in browser.page_source
        flavor = browser.find_element(By.CSS_SELECTOR, 'tr[data-flavor="fast"]')
        assert [c.text for c in flavor.find_elements(By.TAG_NAME, "td")][:2] == ["fast", "hot"]
        placed = {
            r.get_attribute("data-placement"): r.find_element(By.CSS_SELECTOR, ".placed-on").text
            for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-placement]")
        }
        assert placed == {"alpha": "hot", "beta": "hot"}
    finally:
        pooled.stop()


def test_the_pools_link_is_hidden_where_the_admin_api_is_not_served(
    server: ServiceProcess, browser: Any
) -> None:
    browser.get(f"{server.url}/dashboard/?project=p")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#view h1"), "the queue list")
    # The probe answered 404 (no pooling on this server): the link stays hidden.
    assert api(server, "p")("GET", "/v2/pools").status_code == 404
    time.sleep(0.5)
    assert not browser.find_element(By.ID, "pools-link").is_displayed()
