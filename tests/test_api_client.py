"""popcorn.client.api and popcorn.client.sse against a local server (pytest-httpserver on 127.0.0.1)."""
import base64
import json
import os
import re
import socket
import socketserver
import stat
import struct
import threading
import time

import pytest
from werkzeug import Response

from popcorn.client import api, sse
from popcorn.errors import PopkitError

CLI_ID = "c0ffee00-1d-never-print-me"


@pytest.fixture
def client(httpserver):
    return api.Client(httpserver.url_for("/"), CLI_ID, backoff_s=0.0)


@pytest.fixture
def source():
    """A one-line submission file to upload: its name and bytes."""
    return "s.py", b"x = 1\n"


@pytest.fixture
def raw_server():
    """start(act, http=True): a server on 127.0.0.1 that reads each HTTP request (or, http=False, nothing), then
    lets ACT do as it likes with the bare socket (what an HTTP server library will not do: reset the connection,
    cut a reply short); its URL."""
    servers = []

    def start(act, http=True):
        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                if http:
                    head = b"".join(iter(self.rfile.readline, b"\r\n"))
                    length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
                    self.rfile.read(int(length[1]) if length else 0)
                act(self.connection)
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))   # close sends RST
    sock.close()


def close_without_reply(sock):
    pass


def cut_short(sock):
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n[{\"name\": ")


def stall_mid_body(sock):
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n[")
    time.sleep(1.0)


def trickle(sock):
    """A reply whose body comes a byte every 0.05 s for 3 s (no read waits long enough to time out), then stops."""
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n[")
    try:
        for _ in range(60):
            time.sleep(0.05)
            sock.sendall(b" ")
    except OSError:          # the client has stopped reading
        pass


def replies(*bodies):
    """A handler answering each (status, body) in turn, then the last one again."""
    queue = list(bodies)

    def handler(request):
        status, body = queue.pop(0) if len(queue) > 1 else queue[0]
        text = body if isinstance(body, str) else json.dumps(body)
        return Response(text, status=status, content_type="application/json")
    return handler


def served(httpserver, count: int, within_s: float = 5.0) -> None:
    """Wait until the server has logged COUNT requests: a handler still sleeping past the client's timeout
    logged its request after the test had ended, into the next test's log (test_join_with_a_bad_code_is_one_line
    then counted three requests under pytest-xdist)."""
    deadline = time.monotonic() + within_s
    while len(httpserver.log) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(httpserver.log) == count


def late(seconds, body, status=200, content_type="application/json"):
    """A handler answering BODY after SECONDS (within the client's timeout, or past it)."""
    def handler(request):
        time.sleep(seconds)
        return Response(body, status=status, content_type=content_type)
    return handler


# -- configuration ---------------------------------------------------------------------------

def test_missing_config_says_how_to_register(tmp_path):
    with pytest.raises(PopkitError, match=r"no cli_id in .*\.popcorn\.yaml: run `popkit register discord`"):
        api.load_cli_id(tmp_path / ".popcorn.yaml")


def test_broken_yaml_is_reported_without_its_content(tmp_path):
    path = tmp_path / ".popcorn.yaml"
    path.write_text(f"cli_id: [{CLI_ID}\n")
    with pytest.raises(PopkitError) as info:
        api.load_cli_id(path)
    assert "not valid YAML" in str(info.value) and CLI_ID not in str(info.value)


@pytest.mark.parametrize("content, expected", [
    (b"\xff\xfecli_id: x\n", "is not UTF-8 text: fix it or run `popkit register discord`"),
    (b"- cli_id\n- x\n", "is not a YAML mapping"),
    (f'cli_id: "{CLI_ID}\\nX-Other: 1"\n'.encode(), "the cli_id in .* is malformed"),
    (f"cli_id: {{id: {CLI_ID}}}\n".encode(), "the cli_id in .* is malformed"),
    (f"cli_id: '{CLI_ID} '\n".encode(), "the cli_id in .* is malformed"),
])
def test_a_corrupt_config_is_one_line_without_the_id(tmp_path, content, expected):
    # Non-UTF-8 bytes used to raise UnicodeDecodeError (a traceback); an id with a line break reached requests
    # and came back as "cannot reach ...: InvalidHeader"; a YAML list read as "no cli_id".
    path = tmp_path / ".popcorn.yaml"
    path.write_bytes(content)
    with pytest.raises(PopkitError, match=expected) as info:
        api.load_cli_id(path)
    assert CLI_ID not in str(info.value) and "\n" not in str(info.value)


def test_a_config_that_cannot_be_written_is_one_line_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / ".popcorn.yaml"
    path.mkdir()
    with pytest.raises(PopkitError, match=r"cannot write .*\.popcorn\.yaml: Is a directory"):
        api.save_cli_id(CLI_ID, path)
    assert [p.name for p in tmp_path.iterdir()] == [".popcorn.yaml"]


def test_saved_id_is_private_and_keeps_other_keys(tmp_path):
    path = tmp_path / ".popcorn.yaml"
    path.write_text("cli_id: old\ntheme: dark\n")
    api.save_cli_id(CLI_ID, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert api.read_config(path) == {"cli_id": CLI_ID, "theme": "dark"}
    assert api.load_cli_id(path) == CLI_ID
    assert [p.name for p in tmp_path.iterdir()] == [".popcorn.yaml"]


def test_base_url_from_environment(monkeypatch):
    monkeypatch.delenv("POPCORN_API_URL", raising=False)
    assert api.api_url() == api.DEFAULT_API_URL
    monkeypatch.setenv("POPCORN_API_URL", "http://127.0.0.1:9/")
    assert api.api_url() == "http://127.0.0.1:9"


@pytest.mark.parametrize("url", ["", " "])
def test_an_empty_server_url_is_refused_not_read_as_the_hosted_server(monkeypatch, sleeps, url):
    # POPCORN_API_URL=$LOCAL with $LOCAL unset sent every call, uploads included, to the hosted server; the official
    # CLI uses the default only when the variable is unset.
    monkeypatch.setenv("POPCORN_API_URL", url)
    with pytest.raises(PopkitError) as info:
        api.Client(cli_id=CLI_ID)
    assert str(info.value) == ("POPCORN_API_URL is set but empty: unset it to use the hosted server "
                               f"({api.DEFAULT_API_URL}), or set it to your server's URL (http://127.0.0.1:8000)")


@pytest.mark.parametrize("url", ["localhost:8000", "127.0.0.1:8000", "ftp://host", "http://", "http://exa mple.com"])
def test_a_server_url_that_is_not_an_http_url_is_refused_before_any_request(monkeypatch, sleeps, url):
    # These were sent: each GET retried three times, then "cannot reach localhost:8000 (...): InvalidSchema", and
    # an upload added "the upload may still have been accepted" though nothing could have been sent.
    monkeypatch.setenv("POPCORN_API_URL", url)
    with pytest.raises(PopkitError) as info:
        api.Client(cli_id=CLI_ID)
    assert str(info.value) == (f"POPCORN_API_URL is not an http(s) URL: {url.rstrip('/')!r} (it should look like "
                               "https://host or http://127.0.0.1:8000)")


@pytest.mark.parametrize("provider, host", [("discord", "discord.com"), ("github", "github.com")])
def test_authorize_url_carries_the_id_in_its_state(provider, host):
    url = api.authorize_url(provider, CLI_ID, reset=True)
    assert url.startswith(f"https://{host}/") and "auth%2Fcli%2F" + provider in url
    state = url.split("state=")[1].split("&")[0]
    decoded = json.loads(base64.urlsafe_b64decode(state + "=" * (-len(state) % 4)))
    assert decoded == {"cli_id": CLI_ID, "is_reset": True}


# -- requests and replies --------------------------------------------------------------------

def test_every_call_sends_the_id_header(httpserver, client):
    httpserver.expect_request("/leaderboards", headers={api.ID_HEADER: CLI_ID}).respond_with_json([{"name": "qr_v2"}])
    httpserver.expect_request("/gpus/qr_v2", headers={api.ID_HEADER: CLI_ID}).respond_with_json(["B200"])
    assert client.leaderboards() == [{"name": "qr_v2"}]
    assert client.gpus("qr_v2") == ["B200"]


def test_a_redirect_to_another_server_is_not_followed_with_the_id(httpserver, client):
    # requests followed it and sent X-Popcorn-Cli-Id along (it strips only Authorization).
    here = f"127.0.0.1:{httpserver.port}"
    other = f"localhost:{httpserver.port}"             # the same local server under another name
    httpserver.expect_request("/user/submissions", headers={"Host": here}).respond_with_data(
        "", status=302, headers={"Location": f"http://{other}/user/submissions"})
    httpserver.expect_request("/user/submissions").respond_with_json([])
    with pytest.raises(PopkitError) as info:
        client.user_submissions()
    assert str(info.value) == (f"GET /user/submissions was redirected to another server (http://{other}): not "
                               "followed, so that your cli_id is not sent there; if you trust that server, set "
                               "POPCORN_API_URL to it")
    assert len(httpserver.log) == 1


def test_a_redirect_on_the_same_server_is_followed(httpserver, client):
    httpserver.expect_request("/gpus/qr_v2").respond_with_data("", status=307, headers={"Location": "/gpus/qr_v2/"})
    httpserver.expect_request("/gpus/qr_v2/", headers={api.ID_HEADER: CLI_ID}).respond_with_json(["B200"])
    assert client.gpus("qr_v2") == ["B200"]


@pytest.mark.parametrize("status", [301, 302, 307, 308])
@pytest.mark.parametrize("profile", [False, True])
def test_an_upload_answered_with_a_redirect_is_not_followed(httpserver, client, source, status, profile):
    # requests followed it: a 301 or 302 (an http:// POPCORN_API_URL of an https server) turned the upload into a
    # GET of the new address, which ended in a puzzling 405 or "not JSON"; a 307 or 308 sent the file a second time.
    # (A redirect to another server is refused as before, so that the id is not sent there.)
    path = "/qr_v2/B200/profile" if profile else "/submission/qr_v2/B200/test"
    httpserver.expect_request(path, method="POST").respond_with_data("", status=status, headers={"Location": "/new"})
    httpserver.expect_request("/new").respond_with_json({"detail": "Method Not Allowed"}, status=405)
    with pytest.raises(api.HTTPError) as info:
        client.submit_profile("qr_v2", "B200", source) if profile else client.submit("qr_v2", "B200", "test", source)
    assert str(info.value) == (f"POST {path} was answered with a redirect ({status}) to "
                               f"http://127.0.0.1:{httpserver.port}/new: not followed, as a POST is sent once")
    assert [(request.method, request.path) for request, _ in httpserver.log] == [("POST", path)]


@pytest.mark.parametrize("status", [301, 302, 307, 308])
@pytest.mark.parametrize("method, path", [("POST", "/user/join"), ("DELETE", "/user/submissions/7")])
def test_a_join_or_delete_answered_with_a_redirect_is_not_followed(httpserver, client, status, method, path):
    # requests followed it: a 301 or 302 turned the join into a GET without its JSON body (the code was lost),
    # a 307 or 308 sent it again; the same line as an upload's now.
    httpserver.expect_request(path, method=method).respond_with_data("", status=status, headers={"Location": "/new"})
    httpserver.expect_request("/new").respond_with_json({"detail": "Method Not Allowed"}, status=405)
    with pytest.raises(api.HTTPError) as info:
        client.join("INVITE-42") if method == "POST" else client.delete_submission(7)
    assert str(info.value) == (f"{method} {path} was answered with a redirect ({status}) to "
                               f"http://127.0.0.1:{httpserver.port}/new: not followed, as a {method} is sent once")
    assert [(request.method, request.path) for request, _ in httpserver.log] == [(method, path)]


def test_an_upload_redirected_from_http_to_https_names_the_url_to_use(httpserver, client, source):
    response = api.requests.Response()
    response.status_code, response.url = 301, "http://example.org/submission/qr_v2/B200/test"
    response.headers["Location"] = "https://example.org/submission/qr_v2/B200/test"
    assert api.redirect_message("POST", "/submission/qr_v2/B200/test", response, "http://example.org").endswith(
        "not followed, as a POST is sent once; if the server lives there, set POPCORN_API_URL to https://example.org")


def test_an_upload_answered_with_see_other_may_have_been_accepted(httpserver, client, source):
    httpserver.expect_request("/submission/qr_v2/B200/test", method="POST").respond_with_data(
        "", status=303, headers={"Location": "/user/submissions/7"})
    with pytest.raises(api.HTTPError) as info:
        client.submit("qr_v2", "B200", "test", source)
    assert str(info.value).endswith("the upload may have been accepted: see `popkit submissions list "
                                    "--leaderboard qr_v2`")
    assert f"redirect (303) to http://127.0.0.1:{httpserver.port}/user/submissions/7" in str(info.value)
    assert len(httpserver.log) == 1


def test_list_submissions_passes_its_query(httpserver, client):
    httpserver.expect_request("/user/submissions", query_string="limit=5&offset=0&leaderboard=qr_v2",
                              ).respond_with_json([{"id": 3}])
    assert client.user_submissions("qr_v2", limit=5) == [{"id": 3}]


def test_submit_uploads_one_file_part_in_lowercase_path(httpserver, client, tmp_path):
    source = tmp_path / "submission.py"
    source.write_text("#!POPCORN leaderboard qr_v2\nprint(1)\n")
    seen = {}

    def accept(request):
        seen["files"] = {k: (f.filename, f.read()) for k, f in request.files.items()}
        seen["form"] = dict(request.form)
        return Response(json.dumps({"details": {"id": 7, "job_status_id": 7}, "status": "accepted"}),
                        status=202, content_type="application/json")
    httpserver.expect_request("/submission/qr_v2/B200/benchmark", method="POST").respond_with_handler(accept)
    assert client.submit("QR_V2", "B200", "Benchmark", (source.name, source.read_bytes()))["details"]["id"] == 7
    assert seen == {"files": {"file": ("submission.py", source.read_bytes())}, "form": {}}


@pytest.mark.parametrize("status, body, expected", [
    (400, {"detail": "failed to prepare submission request: 413: Submission file is too large"},
     "rejected by the server (400, inner 413): Submission file is too large"),
    (400, {"detail": "Invalid submission mode value: 'x'"}, "rejected by the server (400): Invalid submission mode"),
    (401, {"detail": "Invalid or unauthorized auth header"},
     "does not accept your cli_id (401: Invalid or unauthorized auth header): run `popkit register discord`"),
    (403, {"detail": "Leaderboard is closed"}, "not allowed (403): Leaderboard is closed"),
    (404, {"detail": "Submission 9 not found"}, "not found (404): Submission 9 not found"),
    (413, {"detail": "too big"}, "file too large for the server (413): too big"),
    (422, {"detail": [{"loc": ["body", "file"], "msg": "Field required", "type": "missing"}]},
     "could not read the request (422): body.file: Field required"),
    (429, {"detail": "Rate limit exceeded: 3/2 test submissions per hour. Try again in 3541s."},
     "rate limited (429): Rate limit exceeded: 3/2 test submissions per hour. Try again in 3541s. "
     "(wait 59 min 1 s)"),
    (500, {"message": "KernelBotError: boom"}, "server error (500): KernelBotError: boom"),
    (503, "<html><body>Service   Unavailable</body></html>",
     "server error (503): <html><body>Service Unavailable</body></html>"),
])
def test_error_replies_become_one_clear_line(httpserver, client, source, status, body, expected):
    httpserver.expect_request("/submission/qr_v2/B200/test").respond_with_handler(replies((status, body)))
    with pytest.raises(PopkitError) as info:
        client.submit("qr_v2", "B200", "test", source)
    message = str(info.value)
    assert expected in message and "\n" not in message and CLI_ID not in message
    assert len(httpserver.log) == 1  # a submission is never retried


PROXY_PAGE = ("<!DOCTYPE html><html><head><style>body { font-family: sans-serif; margin: 0 auto; width: 40em }"
              "</style>\n<title>502 Bad Gateway &amp; more</title></head><body><h1>Bad gateway</h1></body></html>")


def test_an_html_error_page_is_named_by_its_title(httpserver, client):
    # A proxy's page used to show as its first 300 characters of markup and style.
    httpserver.expect_request("/leaderboards").respond_with_data(PROXY_PAGE, status=502, content_type="text/html")
    with pytest.raises(PopkitError) as info:
        client.leaderboards()
    assert str(info.value) == "server error (502): 502 Bad Gateway & more"


def test_rate_limit_wait_can_come_from_retry_after(httpserver, client):
    httpserver.expect_request("/leaderboards").respond_with_json({"detail": "slow down"}, status=429,
                                                                  headers={"Retry-After": "90"})
    with pytest.raises(PopkitError, match=r"rate limited \(429\): slow down \(wait 1 min 30 s\)"):
        client.leaderboards()


@pytest.mark.parametrize("body, headers, expected", [
    ({"detail": "slow down"}, {}, "rate limited (429): slow down (the server did not say how long to wait: its "
                                  "limits count the past hour, so wait up to 1 h)"),
    ({"detail": "slow down"}, {"Retry-After": "Fri, 01 Jan 2100 00:00:00 GMT"}, "rate limited (429): slow down (wait "),
    # '²' is a digit to str.isdigit and not to int(): a ValueError traceback.
    ({"detail": "slow down"}, {"Retry-After": "\u00b2"}, "rate limited (429): slow down (the server did not say"),
])
def test_rate_limit_always_says_how_long_to_wait(httpserver, client, body, headers, expected):
    # A 429 without "Try again in Ns" and without a Retry-After in seconds used to say nothing about the wait.
    httpserver.expect_request("/leaderboards").respond_with_json(body, status=429, headers=headers)
    with pytest.raises(PopkitError) as info:
        client.leaderboards()
    assert str(info.value).startswith(expected) and str(info.value).endswith(")")
    assert "h" in str(info.value).rsplit("wait", 1)[1]


@pytest.mark.parametrize("body, expected", [
    ({"detail": "Traceback (most recent call last):\n  File x\nKeyError: 'gpu'"},
     "server error (500): Traceback (most recent call last): File x KeyError: 'gpu'"),
    ({"detail": {"error": "boom"}}, 'server error (500): {"error": "boom"}'),
    ({"detail": "x" * 1000}, "server error (500): " + "x" * 297 + "..."),
])
def test_error_details_stay_on_one_line(httpserver, client, body, expected):
    httpserver.expect_request("/leaderboards").respond_with_json(body, status=500)
    with pytest.raises(PopkitError) as info:
        client.leaderboards()
    assert str(info.value) == expected


@pytest.mark.parametrize("body", [
    {"detail": f"bad header x-popcorn-cli-id: {CLI_ID}"},
    {"detail": [{"loc": ["header"], "msg": "bad", "input": CLI_ID}, "odd"]},
    "<html>" + "x" * 279 + f"{CLI_ID}</html>",        # across the 300-character cut: its start would show
])
def test_an_error_page_that_echoes_the_id_does_not_show_it(httpserver, client, body):
    # A debug page or a proxy that repeats the request's headers put the id into the one-line error.
    httpserver.expect_request("/leaderboards").respond_with_data(
        body if isinstance(body, str) else json.dumps(body), status=400, content_type="application/json")
    with pytest.raises(PopkitError) as info:
        client.leaderboards()
    assert CLI_ID[:12] not in str(info.value)
    assert str(info.value).startswith("rejected by the server (400): ")


@pytest.mark.parametrize("call, path, method, body, kind", [
    (lambda c, src: c.leaderboards(), "/leaderboards", "GET", "<html>" + "x" * 60 + f"{CLI_ID}</html>", "text/html"),
    (lambda c, src: c.submit_profile("qr_v2", "B200", src), "/qr_v2/B200/profile", "POST",
     f"<html>headers: X-Popcorn-Cli-Id: {CLI_ID}</html>", "text/html"),
    (lambda c, src: c.delete_submission(7), "/user/submissions/7", "DELETE",
     json.dumps({"status": "queued", "by": CLI_ID}), "application/json"),
])
def test_a_successful_reply_of_another_shape_that_echoes_the_id_does_not_show_it(httpserver, client, source, call,
                                                                                 path, method, body, kind):
    # Error replies had the id hidden, but a 200 that is not JSON (a proxy's page that repeats the request's
    # headers), a profile reply that is not an event stream, or a DELETE reply without "ok" was quoted as it came.
    httpserver.expect_request(path, method=method).respond_with_data(body, status=200, content_type=kind)
    with pytest.raises(PopkitError) as info:
        call(client, source)
    assert CLI_ID[:12] not in str(info.value) and api.HIDDEN_ID in str(info.value)


def test_gets_retry_gateway_errors_with_backoff(httpserver, sleeps):
    client = api.Client(httpserver.url_for("/"), CLI_ID, backoff_s=0.5)
    httpserver.expect_request("/gpus/qr_v2").respond_with_handler(
        replies((502, "bad gateway"), (503, {"detail": "busy"}), (200, ["B200"])))
    assert client.gpus("qr_v2") == ["B200"]
    assert sleeps == [0.5, 1.0] and len(httpserver.log) == 3


@pytest.mark.parametrize("first, headers", [
    ((503, {"detail": "maintenance"}), {"Retry-After": "20"}),
    ((429, {"detail": "Rate limit exceeded. Try again in 20s."}), {}),
])
def test_gets_wait_as_long_as_the_server_asks_before_asking_again(httpserver, sleeps, first, headers):
    # A 503's Retry-After was ignored (asked again after 1, 2 and 4 s); a 429 with a short wait ended the call.
    status, body = first
    answers = [(status, body, headers), (200, ["B200"], {})]
    httpserver.expect_request("/gpus/qr_v2").respond_with_handler(
        lambda request: Response(json.dumps(answers[0][1]), status=answers[0][0], headers=answers.pop(0)[2],
                                 content_type="application/json"))
    assert api.Client(httpserver.url_for("/"), CLI_ID).gpus("qr_v2") == ["B200"]
    assert sleeps == [20]


@pytest.mark.parametrize("status, headers, body, wait", [
    (503, {"Retry-After": "120"}, {"detail": "maintenance"}, "2 min"),
    (429, {}, {"detail": "Try again in 3541s."}, "59 min 1 s"),
])
def test_a_wait_over_a_minute_is_not_waited_for_but_named(httpserver, sleeps, status, headers, body, wait):
    httpserver.expect_request("/leaderboards").respond_with_json(body, status=status, headers=headers)
    with pytest.raises(api.HTTPError) as info:
        api.Client(httpserver.url_for("/"), CLI_ID).leaderboards()
    assert str(info.value).endswith(f"(wait {wait})") and len(httpserver.log) == 1 and sleeps == []


def test_each_retry_is_told_with_its_pause(httpserver, sleeps):
    notes = []
    httpserver.expect_request("/leaderboards").respond_with_handler(
        replies((502, "bad gateway"), (504, {"detail": "gateway"}), (200, [])))
    assert api.Client(httpserver.url_for("/"), CLI_ID, on_retry=notes.append).leaderboards() == []
    assert notes == ["server error (502): bad gateway; asking again in 1 s (1 of 3)",
                     "server error (504): gateway; asking again in 2 s (2 of 3)"]


def test_gets_give_up_after_their_retries(httpserver, client, sleeps):
    httpserver.expect_request("/leaderboards").respond_with_handler(replies((504, {"detail": "gateway"})))
    with pytest.raises(PopkitError, match=r"server error \(504\): gateway"):
        client.leaderboards()
    assert len(httpserver.log) == 1 + client.retries


def test_deterministic_server_errors_are_not_retried(httpserver, client):
    httpserver.expect_request("/gpus/nope").respond_with_json(
        {"detail": "Error fetching GPU data: Leaderboard `nope` does not exist."}, status=500)
    with pytest.raises(PopkitError, match="server error \\(500\\): Error fetching GPU data"):
        client.gpus("nope")
    assert len(httpserver.log) == 1


def test_malformed_json_is_a_clear_error(httpserver, client):
    httpserver.expect_request("/leaderboards").respond_with_data("{not json", content_type="application/json")
    with pytest.raises(PopkitError, match=r"reply to GET /leaderboards is not JSON: '\{not json'"):
        client.leaderboards()


DEEP = "[" * 100_000 + "]" * 100_000


def test_json_nested_too_deeply_is_a_clear_error(httpserver, client):
    # json's RecursionError used to end in a traceback, for a reply and for an error reply alike.
    httpserver.expect_request("/leaderboards").respond_with_data(DEEP, content_type="application/json")
    with pytest.raises(PopkitError, match=r"reply to GET /leaderboards is not JSON: '\[\[\[\["):
        client.leaderboards()
    httpserver.expect_request("/gpus/qr_v2").respond_with_data(DEEP, status=400, content_type="application/json")
    with pytest.raises(PopkitError, match=r"rejected by the server \(400\): \[\[\["):
        client.gpus("qr_v2")
    assert api.loads_or_text(DEEP)["status"] == DEEP and not api.is_json(DEEP)


def test_lone_surrogates_in_a_reply_become_replacement_characters(httpserver, client):
    # JSON lets '\ud800' through; text holding it could be neither printed nor written as UTF-8 (a traceback).
    body = '[{"name": "qr\\ud800", "gpu_types": ["\\udfff"], "description": "\\ud83d\\ude00"}]'
    httpserver.expect_request("/leaderboards").respond_with_data(body, content_type="application/json")
    assert client.leaderboards() == [{"name": "qr\ufffd", "gpu_types": ["\ufffd"], "description": "\U0001f600"}]


def test_wrong_json_shape_is_a_clear_error(httpserver, client):
    httpserver.expect_request("/leaderboards").respond_with_json({"oops": 1})
    with pytest.raises(PopkitError, match="^the reply to GET /leaderboards is an object, not a list$"):
        client.leaderboards()
    # It said "is not a JSON dict": Python's name, and not what came instead.
    httpserver.expect_request("/user/submissions/7").respond_with_json([])
    with pytest.raises(PopkitError, match="^the reply to GET /user/submissions/7 is a list, not an object$"):
        client.submission(7)


@pytest.mark.parametrize("path, body, call, expected", [
    ("/leaderboards", ["qr_v2"], lambda c: c.leaderboards(), "item 0 is a string, not an object"),
    ("/leaderboards", [None], lambda c: c.leaderboards(), "item 0 is null, not an object"),
    ("/gpus/qr_v2", [{"name": "B200"}], lambda c: c.gpus("qr_v2"), "item 0 is an object, not a string"),
    ("/submissions/qr_v2/B200", [1], lambda c: c.ranking("qr_v2", "B200"), "item 0 is an integer, not an object"),
    ("/user/submissions", [{"id": 1, "runs": {"gpu_type": "B200"}}], lambda c: c.user_submissions(),
     "runs is an object, not a list"),
    ("/user/submissions/7", {"id": 7, "job": "succeeded"}, lambda c: c.submission(7), "job is a string, not an object"),
    ("/user/submissions/7", {"id": 7, "runs": ["test"]}, lambda c: c.submission(7), "run 0 is a string, not an object"),
    ("/user/submissions/7", {"id": 7, "runs": [{"result": ["check"]}]}, lambda c: c.submission(7),
     "run 0 result is a list, not an object"),
    ("/user/submissions/7", {"id": 7, "runner_queue": [], "job": {"status": "running"}},
     lambda c: c.wait(7, limit_s=0), "runner_queue is a list, not an object"),
    ("/user/join", {"status": "ok", "leaderboards": "closed_qr"}, lambda c: c.join("X"),
     "leaderboards is a string, not a list"),
])
def test_replies_of_an_unexpected_shape_are_one_clear_line(httpserver, client, sleeps, path, body, call, expected):
    # Each used to reach the printing code and end in an AttributeError or KeyError traceback.
    httpserver.expect_request(path).respond_with_json(body)
    with pytest.raises(PopkitError) as info:
        call(client)
    assert str(info.value) == f"the reply to {'POST' if 'join' in path else 'GET'} {path} is not as expected: {expected}"


@pytest.mark.parametrize("accepted", [{"details": [7]}, {"details": {"id": True}}, {"details": {}}])
def test_an_upload_reply_without_an_id_says_the_upload_may_have_landed(httpserver, client, source, accepted):
    httpserver.expect_request("/submission/qr_v2/B200/test").respond_with_json(accepted, status=202)
    with pytest.raises(PopkitError, match="the upload may have been accepted: see `popkit submissions list "
                                          "--leaderboard qr_v2`"):
        client.submit("qr_v2", "B200", "test", source)


def test_slow_reply_within_the_timeout_is_fine(httpserver):
    httpserver.expect_request("/gpus/qr_v2").respond_with_handler(late(0.3, '["B200"]'))
    assert api.Client(httpserver.url_for("/"), timeout_s=5).gpus("qr_v2") == ["B200"]


def test_reply_slower_than_the_timeout_fails_after_retries(httpserver, sleeps):
    httpserver.expect_request("/leaderboards").respond_with_handler(late(0.5, "[]"))
    client = api.Client(httpserver.url_for("/"), retries=1, timeout_s=0.1)
    with pytest.raises(api.NetworkError, match=r"no reply from http://127\.0\.0\.1:\d+ within 0\.1 s"):
        client.leaderboards()
    assert sleeps == [1.0]
    served(httpserver, 2)


def test_unreachable_server(sleeps):
    client = api.Client("http://127.0.0.1:9", CLI_ID, retries=2)
    with pytest.raises(api.NetworkError, match=r"cannot reach http://127\.0\.0\.1:9 \(GET /leaderboards\): "
                                                 r"Connection refused"):
        client.leaderboards()
    assert len(sleeps) == 2


@pytest.mark.parametrize("act, how", [
    (reset, "the connection was reset"),
    (close_without_reply, "the server closed the connection without a reply"),
    (cut_short, "the reply was cut off before its end"),
])
def test_a_connection_that_breaks_says_how_and_not_that_the_server_cannot_be_reached(raw_server, sleeps, act, how):
    # These read "cannot reach http://...: ConnectionError" (or ChunkedEncodingError): the server had been reached.
    url = raw_server(act)
    with pytest.raises(api.NetworkError) as info:
        api.Client(url, CLI_ID).leaderboards()
    assert str(info.value) == f"the connection to {url} broke off (GET /leaderboards): {how}"
    assert len(sleeps) == 3                        # a GET: retried


def test_a_reply_that_stalls_in_its_body_is_a_timeout(raw_server, sleeps):
    url = raw_server(stall_mid_body)
    with pytest.raises(api.NetworkError) as info:
        api.Client(url, CLI_ID, retries=0, timeout_s=0.2).leaderboards()
    assert str(info.value) == f"no reply from {url} within 0.2 s (GET /leaderboards)"


@pytest.mark.parametrize("call, what, landed", [
    (lambda client: client.leaderboards(), "GET /leaderboards", ""),
    (lambda client: client.submit("qr_v2", "B200", "test", ("s.py", b"x = 1\n")), "POST /submission/qr_v2/B200/test",
     "; the upload may still have been accepted: see `popkit submissions list --leaderboard qr_v2`")])
def test_a_reply_that_trickles_in_without_end_stops_at_the_deadline(raw_server, sleeps, monkeypatch, call, what,
                                                                    landed):
    # requests' timeout bounds each read alone: a reply trickling in a byte every few seconds held the command
    # forever, silently.
    monkeypatch.setattr(api, "REPLY_DEADLINE_S", 0.5)
    client = api.Client(raw_server(trickle), CLI_ID, timeout_s=2)
    start = time.monotonic()
    with pytest.raises(api.NetworkError) as info:
        call(client)
    assert str(info.value) == f"the reply to {what} was still coming after 0.5 s: stopped reading it{landed}"
    assert time.monotonic() - start < 1.5 and sleeps == []     # not asked again: it would take as long


@pytest.mark.parametrize("status", [200, 500])
def test_a_reply_larger_than_the_limit_is_one_line(httpserver, client, sleeps, monkeypatch, status):
    monkeypatch.setattr(api, "MAX_REPLY_BYTES", 1000)
    httpserver.expect_request("/leaderboards").respond_with_json([{"name": "x" * 2000}], status=status)
    with pytest.raises(PopkitError) as info:
        client.leaderboards()
    assert str(info.value) == "the reply to GET /leaderboards is larger than 1,000 bytes: stopped reading it"


def test_submit_reset_after_sending_says_it_may_have_landed(raw_server, source, sleeps):
    url = raw_server(reset)
    with pytest.raises(api.NetworkError) as info:
        api.Client(url, CLI_ID).submit("qr_v2", "B200", "test", source)
    assert str(info.value) == (f"the connection to {url} broke off (POST /submission/qr_v2/B200/test): the connection "
                               "was reset; the upload may still have been accepted: see `popkit submissions list "
                               "--leaderboard qr_v2`")
    assert sleeps == []


def test_a_failed_tls_handshake_says_nothing_was_uploaded(raw_server, source, sleeps):
    # https:// to a plain-HTTP server: the request never left, but the error said it "may still have been accepted".
    url = raw_server(lambda sock: sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"), http=False)
    url = url.replace("http://", "https://")
    with pytest.raises(api.NetworkError) as info:
        api.Client(url, CLI_ID).submit("qr_v2", "B200", "test", source)
    assert str(info.value).startswith(f"cannot reach {url} (POST /submission/qr_v2/B200/test): ")
    assert str(info.value).endswith("; nothing was uploaded") and info.value.sent is False


def test_submit_cut_off_after_sending_says_it_may_have_landed(httpserver, source, sleeps):
    httpserver.expect_request("/submission/qr_v2/B200/test").respond_with_handler(late(0.5, "{}", status=202))
    with pytest.raises(api.NetworkError, match="may still have been accepted: see `popkit submissions list "
                                                "--leaderboard qr_v2`"):
        api.Client(httpserver.url_for("/"), CLI_ID, timeout_s=0.1).submit("qr_v2", "B200", "test", source)
    assert sleeps == []
    served(httpserver, 1)


def test_submit_that_never_connected_says_nothing_was_uploaded(source, sleeps):
    with pytest.raises(api.NetworkError) as info:
        api.Client("http://127.0.0.1:9", CLI_ID).submit("qr_v2", "B200", "test", source)
    assert str(info.value) == ("cannot reach http://127.0.0.1:9 (POST /submission/qr_v2/B200/test): "
                               "Connection refused; nothing was uploaded")
    assert sleeps == []


def test_profile_that_never_connected_says_nothing_was_uploaded(source, sleeps):
    # It said 'Connection refused' alone, where submit says that nothing was uploaded.
    with pytest.raises(api.NetworkError) as info:
        api.Client("http://127.0.0.1:9", CLI_ID).submit_profile("qr_v2", "B200", source)
    assert str(info.value) == ("cannot reach http://127.0.0.1:9 (POST /qr_v2/B200/profile): Connection refused; "
                               "nothing was uploaded")


def test_profile_cut_off_after_sending_says_the_run_may_go_on(httpserver, source, sleeps):
    httpserver.expect_request("/qr_v2/B200/profile").respond_with_handler(
        late(0.5, "", content_type="text/event-stream"))
    with pytest.raises(api.NetworkError) as info:
        api.Client(httpserver.url_for("/"), CLI_ID, timeout_s=0.1).submit_profile("qr_v2", "B200", source)
    assert str(info.value).endswith("; the profile run may still go on at the server, and cannot be followed again "
                                    "(a profile run has no submission id)")
    served(httpserver, 1)


def test_without_an_id_a_401_says_none_is_configured(httpserver):
    httpserver.expect_request("/gpus/closed_board").respond_with_json(
        {"detail": "Invalid or unauthorized auth header"}, status=401)
    with pytest.raises(PopkitError) as info:
        api.Client(httpserver.url_for("/")).gpus("closed_board")
    assert str(info.value) == ("this needs a cli_id and none is configured (401: Invalid or unauthorized auth "
                               f"header): {api.REGISTER_HINT}")
    assert "does not accept your cli_id" not in str(info.value)


# -- access ----------------------------------------------------------------------------------

def test_join_posts_the_code_with_the_id(httpserver, client):
    httpserver.expect_request("/user/join", method="POST", headers={api.ID_HEADER: CLI_ID},
                              json={"code": "INVITE-42"}).respond_with_json(
        {"status": "ok", "leaderboards": ["closed_qr"]})
    assert client.join("INVITE-42") == ["closed_qr"]


def test_join_with_a_bad_code_is_one_line(httpserver, client):
    httpserver.expect_request("/user/join", method="POST").respond_with_json(
        {"detail": "Invalid or expired invite code"}, status=400)
    with pytest.raises(PopkitError, match=r"^rejected by the server \(400\): Invalid or expired invite code$"):
        client.join("nope")
    assert len(httpserver.log) == 1


@pytest.mark.parametrize("status, valid", [(200, True), (401, False)])
def test_id_is_valid_asks_an_authenticated_endpoint(httpserver, client, status, valid):
    httpserver.expect_request("/user/submissions", query_string="limit=1&offset=0",
                              headers={api.ID_HEADER: CLI_ID}).respond_with_json(
        [] if status == 200 else {"detail": "Invalid or unauthorized auth header"}, status=status)
    assert client.id_is_valid() is valid


def test_id_is_valid_passes_other_errors_on(httpserver, client):
    httpserver.expect_request("/user/submissions").respond_with_json({"detail": "db down"}, status=500)
    with pytest.raises(PopkitError, match="server error"):
        client.id_is_valid()


def test_update_config_sets_and_removes_keys(tmp_path):
    path = tmp_path / ".popcorn.yaml"
    path.write_text("cli_id: old\n")
    api.update_config({api.PENDING_KEY: "new"}, path)
    assert api.read_config(path) == {"cli_id": "old", api.PENDING_KEY: "new"}
    api.save_cli_id("new", path)
    assert api.read_config(path) == {"cli_id": "new"}


# -- following a submission ------------------------------------------------------------------

def state(status, done=False):
    return {"id": 7, "done": done, "runs": [], "job": {"status": status, "error": None}}


def test_wait_polls_until_a_terminal_job_status(httpserver, client, sleeps):
    # `done` turns true before the final job status is written: keep polling through it
    polls = [state("pending"), state("running"), state("running", done=True), state("succeeded", done=True)]
    httpserver.expect_request("/user/submissions/7").respond_with_handler(replies(*[(200, p) for p in polls]))
    seen = []
    data, raw = client.wait(7, interval_s=2.5, on_poll=lambda elapsed, s: seen.append(s["job"]["status"]))
    assert seen == ["pending", "running", "running", "succeeded"]
    assert data == polls[-1] and json.loads(raw) == polls[-1]
    assert sleeps == [2.5, 2.5, 2.5]


@pytest.mark.parametrize("terminal", ["failed", "timed_out", "hacked"])
def test_wait_stops_at_every_terminal_status(httpserver, client, sleeps, terminal):
    httpserver.expect_request("/user/submissions/7").respond_with_json(state(terminal, done=True))
    assert client.wait(7)[0]["job"]["status"] == terminal


@pytest.mark.parametrize("status", ["cancelled", ["running"], 3])
def test_wait_stops_at_a_job_status_it_does_not_know(httpserver, client, sleeps, status):
    # an unknown status was taken for "still running": an hour of polling a job that had ended
    httpserver.expect_request("/user/submissions/7").respond_with_json(state(status))
    with pytest.raises(PopkitError, match=r"submission 7: job status .* is none popkit knows .*: stopped waiting; "
                                          r"see `popkit submissions show 7`"):
        client.wait(7)
    assert sleeps == []


def test_wait_without_a_job_row_trusts_done(httpserver, client, sleeps):
    httpserver.expect_request("/user/submissions/7").respond_with_handler(
        replies((200, {"id": 7, "done": False}), (200, {"id": 7, "done": True})))
    assert client.wait(7)[0]["done"] is True


def test_wait_gives_up_after_its_limit(httpserver, client, sleeps):
    httpserver.expect_request("/user/submissions/7").respond_with_json(state("running"))
    with pytest.raises(PopkitError, match="submission 7 is not finished after 0 min"):
        client.wait(7, limit_s=0)


# -- the event stream (profile) --------------------------------------------------------------

def event_stream(*frames, delay_s=0.0):
    def handler(request):
        def chunks():
            for frame in frames:
                time.sleep(delay_s)
                yield frame.encode()
        return Response(chunks(), content_type="text/event-stream")
    return handler


def test_profile_streams_status_then_returns_the_raw_result(httpserver, client, source):
    result = json.dumps({"status": "success", "results": [], "reports": []})
    httpserver.expect_request("/qr_v2/B200/profile", method="POST").respond_with_handler(event_stream(
        'event: status\ndata: {"status":"processing","elapsed_time":0.0}\n\n',
        ': keep-alive\n\nevent: status\ndata: {"status":"processing",',
        '"elapsed_time":15.0}\n\n',
        f"event: result\ndata: {result}\n\n", delay_s=0.05))
    statuses = []
    assert client.submit_profile("qr_v2", "B200", source, on_status=statuses.append) == result
    assert [s["elapsed_time"] for s in statuses] == [0.0, 15.0]
    assert "file" in httpserver.log[0][0].files


@pytest.mark.parametrize("frame, expected", [
    ('event: error\ndata: {"status":"error","detail":"Leaderboard deadline passed","status_code":400}\n\n',
     r"profile run failed: \(400\) Leaderboard deadline passed"),
    ('event: error\ndata: {"status":"error","detail":"An unexpected error occurred: KeyError"}\n\n',
     "profile run failed: An unexpected error occurred: KeyError"),
    ('event: status\ndata: {"status":"processing"}\n\n', "the event stream ended without a result"),
    ('event: error\ndata: {"status":"error","detail":"Rate limit exceeded: 3/2 test submissions per hour. '
     'Try again in 3541s.","status_code":400}\n\n',
     r"profile run failed: \(400\) Rate limit exceeded: .* Try again in 3541s\. \(rate limited: wait 59 min 1 s\)$"),
])
def test_profile_error_events_and_truncated_streams(httpserver, client, source, frame, expected):
    httpserver.expect_request("/qr_v2/B200/profile").respond_with_handler(event_stream(frame))
    with pytest.raises(PopkitError, match=expected):
        client.submit_profile("qr_v2", "B200", source)


def test_profile_validation_errors_are_plain_http_errors(httpserver, client, source):
    httpserver.expect_request("/qr_v2/B200/profile").respond_with_json(
        {"detail": "Your code contains work on another stream"}, status=500)
    with pytest.raises(PopkitError, match=r"server error \(500\): Your code contains work on another stream"):
        client.submit_profile("qr_v2", "B200", source)


def test_sse_parser_handles_split_chunks_crlf_comments_and_multiline_data():
    chunks = [b"event: st", b"atus\r\ndata: a\r\n\r\n: comment\n", b"data: line1\ndata:line2\n\n",
              b"event: result\ndata: {\"x\": \"\xc3", b"\xa9\"}"]
    assert list(sse.iter_events(chunks, 100)) == [
        sse.Event("status", "a"), sse.Event("message", "line1\nline2"),
        sse.Event("result", '{"x": "é"}', complete=False)]    # no closing blank line: delivered, marked


def test_sse_parser_reads_a_large_result_in_small_chunks_in_linear_time():
    # Each chunk re-split everything buffered so far: 20 MB in 16 KB chunks took 10 s, 40 MB a minute (a profile
    # result carries its trace archives in base64).
    data = b"event: result\ndata: " + b"A" * 24_000_000 + b"\n\n"
    start = time.monotonic()
    [event] = sse.iter_events((data[i:i + 16384] for i in range(0, len(data), 16384)), len(data))
    assert time.monotonic() - start < 3.0 and len(event.data) == 24_000_000


def test_a_stream_cut_in_the_middle_of_the_result_says_it_broke_off(httpserver, client, source):
    # The cut result used to be returned as the result, and then reported as "the profile result is not JSON".
    httpserver.expect_request("/qr_v2/B200/profile").respond_with_handler(event_stream(
        'event: status\ndata: {"status":"processing","elapsed_time":0.0}\n\n',
        'event: result\ndata: {"status":"success","results":[{"succ'))
    with pytest.raises(api.NetworkError, match=r"the event stream from http://127\.0\.0\.1:\d+ broke off in the "
                                               r"middle of the result: nothing was saved"):
        client.submit_profile("qr_v2", "B200", source)


def test_a_complete_result_without_its_closing_blank_line_is_still_the_result(httpserver, client, source):
    httpserver.expect_request("/qr_v2/B200/profile").respond_with_handler(event_stream(
        'event: result\ndata: {"status": "success", "results": []}'))
    assert json.loads(client.submit_profile("qr_v2", "B200", source)) == {"status": "success", "results": []}


def test_an_event_stream_line_longer_than_the_limit_is_one_line(httpserver, client, source, monkeypatch):
    # A line without end was held in memory whole.
    monkeypatch.setattr(api, "MAX_EVENT_LINE_BYTES", 1000)
    httpserver.expect_request("/qr_v2/B200/profile").respond_with_handler(event_stream(
        'event: status\ndata: {"status":"processing","elapsed_time":0.0}\n\n', "event: result\ndata: " + "A" * 5000))
    with pytest.raises(PopkitError) as info:
        client.submit_profile("qr_v2", "B200", source)
    assert re.fullmatch(r"a line of the event stream from http://127\.0\.0\.1:\d+ is longer than 1,000 bytes: "
                        r"stopped reading it", str(info.value))


def test_an_event_stream_may_last_longer_than_a_replys_deadline(httpserver, client, source, monkeypatch):
    monkeypatch.setattr(api, "REPLY_DEADLINE_S", 0.1)
    httpserver.expect_request("/qr_v2/B200/profile").respond_with_handler(event_stream(
        'event: status\ndata: {"status":"processing","elapsed_time":0.0}\n\n',
        'event: result\ndata: {"status": "success"}\n\n', delay_s=0.2))
    assert client.submit_profile("qr_v2", "B200", source) == '{"status": "success"}'


def test_a_profile_reply_that_is_not_an_event_stream_is_named(httpserver, client, source):
    # A proxy's JSON or HTML page used to read as "the event stream ended without a result".
    httpserver.expect_request("/qr_v2/B200/profile").respond_with_data('{"detail": "maintenance"}',
                                                                       content_type="application/json")
    with pytest.raises(PopkitError) as info:
        client.submit_profile("qr_v2", "B200", source)
    assert str(info.value) == ("the reply to POST /qr_v2/B200/profile is not an event stream (application/json): "
                               "'{\"detail\": \"maintenance\"}'")


def test_a_stalled_event_stream_says_how_long_it_was_silent(httpserver, source):
    # It said "broke off: ConnectionError".
    def stall(request):
        def frames():
            yield b'event: status\ndata: {"status":"processing","elapsed_time":0.0}\n\n'
            time.sleep(0.6)
            yield b""
        return Response(frames(), content_type="text/event-stream")
    httpserver.expect_request("/qr_v2/B200/profile").respond_with_handler(stall)
    client = api.Client(httpserver.url_for("/"), CLI_ID, timeout_s=0.3)
    with pytest.raises(api.NetworkError, match=r"^the event stream from http://127\.0\.0\.1:\d+ broke off: no data "
                                               r"for 0\.3 s$"):
        client.submit_profile("qr_v2", "B200", source)
