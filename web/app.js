// Entry point of Kiln's web UI: sign-in with an API token (kept in localStorage), loading targets,
// models and jobs, and the hash router (#/ for upload + jobs, #/jobs/ID for one job, #/compare/A/B for two).

import { api, getToken, onUnauthorized, setToken } from "./api.js";
import { mountComparePage } from "./compare_page.js";
import { mountCompose } from "./compose.js";
import { mountJobPage } from "./job_page.js";
import { mountJobsList } from "./jobs_list.js";
import { refreshJobs, refreshModels, resetStore, store } from "./store.js";
import { $, showMessage } from "./ui.js";

let compose = null; // the upload/compile panel, built once per sign-in so its state survives routing
let unmountJobs = null;
let unmountPage = null;

function show(id, visible) {
  $(`#${id}`).hidden = !visible;
}

function showSignIn(error) {
  show("session", false);
  show("home", false);
  show("job-view", false);
  show("signin", true);
  showMessage($("#signin-error"), error || null);
  $("#token-input").focus();
}

function signOut(error) {
  setToken("");
  resetStore();
  unmountJobs?.();
  unmountPage?.();
  unmountJobs = unmountPage = compose = null;
  $("#compose").replaceChildren();
  $("#jobs").replaceChildren();
  $("#job-view").replaceChildren();
  showMessage($("#banner"), null);
  showSignIn(error);
}

// A 401 anywhere (token revoked meanwhile) sends the user back to sign in, saying why.
onUnauthorized((error) => {
  if (getToken()) signOut(error);
});

async function start() {
  show("signin", false);
  show("session", true);
  compose = mountCompose($("#compose"));
  unmountJobs = mountJobsList($("#jobs"));
  route();
  const loads = [
    api.targets().then((targets) => {
      store.targets = targets;
      compose?.fillTargets();
    }),
    refreshModels().then(() => compose?.fillModels()),
    refreshJobs(),
  ];
  const results = await Promise.allSettled(loads);
  const failure = results.find((r) => r.status === "rejected");
  if (failure && getToken() && failure.reason.status !== 401) showMessage($("#banner"), failure.reason);
}

function route() {
  if (!getToken()) return;
  const match = /^#\/jobs\/([\w-]+)/.exec(location.hash);
  unmountPage?.();
  unmountPage = null;
  const compare = /^#\/compare\/([\w-]+)(?:\/([\w-]+))?/.exec(location.hash);
  if (match || compare) {
    show("home", false);
    show("job-view", true);
    unmountPage = match ? mountJobPage($("#job-view"), match[1]) : mountComparePage($("#job-view"), compare[1], compare[2]);
  } else {
    show("job-view", false);
    $("#job-view").replaceChildren();
    show("home", true);
  }
  window.scrollTo(0, 0);
}

$("#signin-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = $("#token-input");
  const token = input.value.trim();
  const button = event.submitter || $("[data-testid=token-submit]");
  if (!token) {
    showMessage($("#signin-error"), { message: "Enter your API token." });
    return;
  }
  button.disabled = true;
  try {
    // Check the token before keeping it: GET /targets needs auth and is cheap.
    store.targets = await api.targets(token);
    setToken(token);
    input.value = "";
    showMessage($("#signin-error"), null);
    const started = start();
    // The focused sign-in button just disappeared: continue keyboard navigation from the top of the app.
    if (!document.activeElement || document.activeElement === document.body) $("#main").focus({ preventScroll: true });
    await started;
  } catch (error) {
    showMessage($("#signin-error"), error);
    input.select();
  } finally {
    button.disabled = false;
  }
});

$("#sign-out").addEventListener("click", () => signOut(null));
window.addEventListener("hashchange", route);

if (getToken()) start();
else showSignIn(null);
