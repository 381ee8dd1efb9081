// fasa serve's chat page in headless Chromium, as a user meets it: the page loads with the server's
// policies, a message sent with FASA at a budget streams a reply, and the reply shows its policy,
// budget, speed and KV bytes read per token. Saves a screenshot beside the log (docs/SERVER.md).
// Usage: node page.mjs URL CHROMIUM SCREENSHOT
import puppeteer from "puppeteer-core";

const [url, chromium, screenshot] = process.argv.slice(2);
const fail = (why) => { console.error("FAIL: " + why); process.exitCode = 1; };

const browser = await puppeteer.launch({
  executablePath: chromium, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],  // root in CI; no GPU
});
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(url, { waitUntil: "networkidle0" });
  const policies = await page.$$eval("#attn option", (os) => os.map((o) => o.value));
  if (!policies.includes("fasa") || !policies.includes("full")) fail("policies offered: " + policies);
  if (!(await page.$eval("#model", (e) => e.textContent)).includes(".gguf")) fail("no model name in the header");

  await page.select("#attn", "fasa");
  await page.$eval("#budget", (e) => { e.value = "16"; });
  await page.type("#input", "Ge1:1 In the beginning");
  await page.keyboard.press("Enter");
  // The reply streams in, then its statistics line follows.
  await page.waitForSelector(".assistant .stats", { timeout: 60000 });
  const reply = await page.$eval(".assistant", (e) => e.firstChild.textContent);
  const stats = await page.$eval(".assistant .stats", (e) => e.textContent);
  console.log("reply:", JSON.stringify(reply));
  console.log("stats:", stats);
  if (reply.trim().length === 0) fail("empty reply");
  if (!/^fasa, budget 16 · \d+ tokens at [\d.]+ tokens\/s · KV read [\d.]+ KiB per token/.test(stats)) fail("stats: " + stats);
  if (await page.$(".error")) fail("an error turn: " + (await page.$eval(".error", (e) => e.textContent)));

  // A second turn carries the conversation: the request holds both user turns.
  const sent = new Promise((resolve) => page.on("request", (r) => {
    if (r.url().endsWith("/v1/chat/completions")) resolve(JSON.parse(r.postData()));
  }));
  await page.type("#input", "And the earth");
  await page.click("#send");
  const second = await sent;
  await page.waitForFunction(() => document.querySelectorAll(".assistant .stats").length === 2, { timeout: 60000 });
  if (second.messages.length !== 3 || second.attn !== "fasa" || second.budget !== "16")
    fail("second request: " + JSON.stringify(second));
  if (errors.length) fail("page errors: " + errors.join("; "));
  await page.screenshot({ path: screenshot });
  console.log(process.exitCode ? "chat page: FAILED" : "chat page: passed (screenshot " + screenshot + ")");
} finally {
  await browser.close();
}
