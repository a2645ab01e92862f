"""A scripted OpenAI-compatible chat endpoint for the deployment test (standard library only).

It answers every chat completion with the reference solution, from a native task file, of the
language the code-block system prompt asks for ("Solve the task in LANG."), in a fenced block.
Prints `listening on http://127.0.0.1:PORT/v1`, serves until stdin closes, and at exit prints the
number of requests it answered.

    python3 fake_openai.py TASKS.jsonl
"""

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

solutions = {}
with open(sys.argv[1]) as f:
    for line in f:
        if line.strip():
            task = json.loads(line)
            solutions[task["language"]] = task["reference_solution"]
answered = 0


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        global answered
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        text = "\n".join(str(m.get("content") or "") for m in body["messages"])
        m = re.search(r"Solve the task in (\w+)\.", text)
        if not self.path.endswith("/chat/completions") or not m or m.group(1) not in solutions:
            self.send_error(400, "unexpected request")
            return
        lang = m.group(1)
        content = f"```{lang}\n{solutions[lang]}```\n"
        reply = {
            "id": f"chatcmpl-{answered}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": len(text.split()), "completion_tokens": len(content.split()),
                      "total_tokens": len(text.split()) + len(content.split())},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        answered += 1


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
print(f"listening on http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
sys.stdin.read()
server.shutdown()
print(f"answered {answered}", flush=True)
