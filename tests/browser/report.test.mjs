// The HTML report of `codegym report` in real headless Chromium (Debian's, driven by
// playwright-core): the page loads without console errors or network requests, every chart
// renders, a trajectory opens with its messages, code and execution results (and a step's
// cross-check), filtering by task and outcome works, and the hostile model text in the dataset is
// shown as text and never runs.
//
// Input: CODEGYM_REPORT_HTML, a page written by `tests/report.rs` with CODEGYM_REPORT_KEEP_DIR
// (its dataset has one task whose answers are `</script><script>...` and `<img onerror=...>`).
import { test } from "node:test";
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";
import { chromium } from "playwright-core";

const html = process.env.CODEGYM_REPORT_HTML;
const shot = process.env.CODEGYM_REPORT_SCREENSHOT;

// This machine's Chromium needs these flags: no sandbox as root, and no background connections
// to the closed network.
const ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

test("the report renders, opens trajectories, filters, and runs no hostile text", async () => {
  assert.ok(html, "set CODEGYM_REPORT_HTML to a report page");
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ARGS });
  try {
    const page = await browser.newPage();
    const problems = [];
    page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") problems.push(m.type() + ": " + m.text()); });
    page.on("pageerror", (e) => problems.push("pageerror: " + e.message));
    page.on("dialog", (d) => { problems.push("dialog: " + d.message()); d.dismiss(); });
    const url = pathToFileURL(html).href;
    const requests = [];
    page.on("request", (r) => { if (r.url() !== url) requests.push(r.url()); });
    await page.goto(url, { waitUntil: "load" });

    const data = await page.evaluate(() => JSON.parse(document.getElementById("report-data").textContent));
    assert.equal(await page.locator("#overview .card").count(), 7);
    assert.equal(await page.locator("#tasks tbody tr").count(), data.tasks.length);
    // Seven charts, every one drawn (bars whose heights follow the counts) or saying "no data".
    const charts = page.locator("figure[data-chart]");
    assert.equal(await charts.count(), 7);
    const stopBars = page.locator('figure[data-chart="stop reasons"] rect.bar');
    assert.equal(await stopBars.count(), data.stop_reasons.length);
    const heights = await stopBars.evaluateAll((rs) => rs.map((r) => Number(r.getAttribute("height"))));
    assert.ok(heights.every((h) => h > 0));
    assert.ok(heights[0] >= heights[heights.length - 1], "bars follow the counts (sorted descending)");
    for (const name of ["final reward", "model turns per episode", "episode wall time", "model call latency"]) {
      const box = await page.locator(`figure[data-chart="${name}"] svg`).boundingBox();
      assert.ok(box && box.width > 100 && box.height > 40, `${name} is drawn`);
    }

    // The run cross-checked its rewarded programs: the section shows the counts.
    assert.ok(data.cross_checks, "the dataset has cross-checks");
    assert.ok(await page.locator("#cross-checks").isVisible());
    assert.equal(await page.locator("#cross-check-counts").textContent(),
      `agree ${data.cross_checks.agree} · disagree ${data.cross_checks.disagree} · unavailable ${data.cross_checks.unavailable} · error ${data.cross_checks.error}`);

    // Every episode is listed; open the hostile task's first one.
    const items = page.locator("#episode-list button");
    assert.equal(await items.count(), data.records.length);
    const hostile = data.records.find((r) => JSON.stringify(r.messages).includes("window.__pwned"));
    assert.ok(hostile, "the dataset has the hostile episode");
    await page.selectOption("#filter-task", hostile.task_id);
    const mine = data.records.filter((r) => r.task_id === hostile.task_id).length;
    assert.equal(await items.count(), mine);
    assert.equal(await page.locator("#filter-count").textContent(), `${mine} of ${data.records.length} episodes`);
    await items.first().click();
    const detail = page.locator("#episode-detail");
    await detail.locator("h3").waitFor();
    // u64 seeds are shown exactly, not as a rounded JavaScript number.
    const index = Number(await items.first().getAttribute("data-index"));
    assert.ok((await detail.locator("p").first().textContent()).includes("seed " + data.seeds[index] + " "));
    assert.match(await detail.locator(".msg.assistant pre.content").first().textContent(), /<\/script><script>window\.__pwned = 1<\/script><img src=x onerror=/);
    assert.match(await detail.locator("pre.code").first().textContent(), /print\(/);
    assert.match(await detail.locator("pre.stdout").first().textContent(), /window\.__pwned = 1/);
    assert.equal(await page.locator("#episode-detail img, #episode-detail script").count(), 0);
    assert.equal(await page.locator("script").count(), 2);
    assert.equal(await page.evaluate(() => window.__pwned), undefined, "hostile text ran");
    if (shot) await page.screenshot({ path: shot, fullPage: true });

    // A solved episode's step shows its cross-check.
    await page.selectOption("#filter-task", "");
    await page.selectOption("#filter-outcome", "solved");
    await items.first().click();
    assert.match(await detail.locator(".cross-check").first().textContent(), /^cross-check: agree on all \d+ inputs · action keep · env reward 1$/);
    await page.selectOption("#filter-outcome", "all");

    // Outcome filters: across all tasks, each shows exactly the episodes of that outcome.
    for (const [value, pick] of [
      // Errored: an infrastructure failure (`error`, `cancelled`), as the overview's count has it.
      ["solved", (r) => r.solved && !["error", "cancelled"].includes(r.stop_reason)],
      ["unsolved", (r) => !r.solved && !["error", "cancelled"].includes(r.stop_reason)],
      ["error", (r) => ["error", "cancelled"].includes(r.stop_reason)],
    ]) {
      await page.selectOption("#filter-outcome", value);
      const want = data.records.filter(pick).length;
      assert.equal(await items.count(), want, value);
      const outcomes = await items.evaluateAll((bs) => bs.map((b) => b.dataset.outcome));
      assert.ok(outcomes.every((o) => o === value), value);
    }
    await page.selectOption("#filter-outcome", "all");
    assert.equal(await items.count(), data.records.length);

    assert.deepEqual(requests, [], "the page fetched nothing");
    assert.deepEqual(problems, [], "no console errors");
  } finally {
    await browser.close();
  }
});
