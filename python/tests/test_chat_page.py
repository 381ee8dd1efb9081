"""fasa serve's chat page (GET /) in headless Chromium driven by Selenium, as a user meets it: the page
loads with the server's policies and the model's name, a message sent with FASA at a budget streams a
reply whose statistics line says what ran (a short first prompt: full attention until a prompt is long
enough to measure FASA's profile, and why), the speed and KV bytes read per token, and a second turn,
with StreamingLLM, sends the whole conversation, runs as asked and finds the first turn's prompt cached. A screenshot goes to $FASA_SCREENSHOT_DIR (ctest: the build folder).

Needs Debian's chromium and chromium-driver and Selenium (python/requirements-test.txt); where one is
missing the test skips with a message, FASA_REQUIRE_TEST_DEPS=1 (CI) makes that a failure.
"""
import json
import os
import re
import shutil

import pytest

from serve import serve

try:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.wait import WebDriverWait
    missing = [p for p in ("chromium", "chromedriver") if not shutil.which(p)]
    if missing:
        raise ImportError(" and ".join(missing) + " not found (apt-get install chromium chromium-driver)")
except ImportError as e:
    if os.environ.get("FASA_REQUIRE_TEST_DEPS"):
        raise
    pytest.skip(f"the chat page's browser test needs Selenium, chromium and chromium-driver: {e}", allow_module_level=True)

SPEED = r" · \d+ tokens at [\d.]+ tokens/s · KV read [\d.]+ KiB per token"
FIRST = re.compile(r"^fasa: full attention \(no profile of this model yet, .* it needs 1024 tokens\)" + SPEED)
SECOND = re.compile(r"^stream: budget 16 tokens per head" + SPEED)


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1000,800"):
        options.add_argument(arg)  # (root in CI; no GPU)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(shutil.which("chromedriver")))
    yield driver
    driver.quit()


def test_a_fasa_conversation_on_the_chat_page(browser):
    with serve() as base:
        browser.get(base + "/")
        wait = WebDriverWait(browser, 60)
        attn = Select(wait.until(lambda d: d.find_element(By.ID, "attn") if d.find_elements(By.CSS_SELECTOR, "#attn option") else None))
        assert {"full", "fasa"} <= {o.get_attribute("value") for o in attn.options}
        wait.until(lambda d: ".gguf" in d.find_element(By.ID, "model").text)
        # Every request the page sends, recorded (the second turn must carry the first).
        browser.execute_script("window.sent = []; const f = window.fetch;"
                               "window.fetch = (u, o) => { if (o && o.body) window.sent.push(o.body); return f(u, o); };")
        attn.select_by_value("fasa")
        budget = browser.find_element(By.ID, "budget")
        budget.clear()
        budget.send_keys("16")
        temperature = browser.find_element(By.ID, "temperature")
        temperature.clear()
        temperature.send_keys("0")
        browser.find_element(By.ID, "input").send_keys("Ge1:1 In the beginning", Keys.ENTER)
        stats = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".assistant .stats"))
        reply = browser.execute_script("return document.querySelector('.assistant').firstChild.textContent")
        assert reply.strip(), "an empty reply"
        assert FIRST.match(stats[0].text), stats[0].text
        assert not browser.find_elements(By.CSS_SELECTOR, ".error")

        attn.select_by_value("stream")
        browser.find_element(By.ID, "input").send_keys("And the earth")
        browser.find_element(By.ID, "send").click()
        stats = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".assistant .stats")[1:])
        assert SECOND.match(stats[0].text), stats[0].text
        # only the policy changed: the first turn's prompt stays cached (StreamingLLM's state is the cache)
        assert int(re.search(r"\((\d+) cached\)", stats[0].text).group(1)) > 0, stats[0].text
        second = json.loads(browser.execute_script("return window.sent[window.sent.length - 1]"))
        assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
        assert (second["attn"], second["budget"], second["temperature"]) == ("stream", "16", 0)
        errors = [e for e in browser.get_log("browser") if e["source"] == "javascript"]  # (not the favicon's 404)
        assert not errors, errors
        browser.save_screenshot(os.path.join(os.environ.get("FASA_SCREENSHOT_DIR", "."), "chat-page.png"))
