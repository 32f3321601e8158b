// The service worker caches the static shell only: the page, its modules, styles and icons.
// API answers (/api/...) and the table WebSocket always go to the network, never the cache.
const CACHE = "mesa-shell-v2";
const SHELL = [
  "/", "/index.html", "/style.css", "/close-report.css", "/manifest.json",
  "/js/api.js", "/js/app.js", "/js/audit-log.js", "/js/closing.js", "/js/compliance.js", "/js/finance.js",
  "/js/guard.js", "/js/i18n.js", "/js/identity.js", "/js/invitations.js", "/js/limits.js", "/js/notes.js", "/js/reconcile.js",
  "/js/refunds.js", "/js/rematch.js", "/js/replay.js", "/js/report.js", "/js/snake.js", "/js/staff.js",
  "/js/support.js", "/js/table.js", "/js/tiles.js", "/js/verify.js", "/js/witness-policy.js",
  "/icons/favicon.svg", "/icons/icon-32.png", "/icons/icon-180.png", "/icons/icon-192.png", "/icons/icon-512.png",
];

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k !== CACHE).map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});

// Network first for the shell (a new deploy shows at once); the cache only when offline.
self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== self.location.origin) return;
  if (url.pathname.startsWith("/api/") || url.pathname.startsWith("/schema")) return;
  const path = url.pathname === "/" ? "/" : url.pathname;
  if (!SHELL.includes(path)) return;
  event.respondWith(
    fetch(event.request)
      .then((res) => {
        if (res.ok) { const copy = res.clone(); caches.open(CACHE).then((c) => c.put(event.request, copy)); }
        return res;
      })
      .catch(() => caches.match(event.request)),
  );
});
