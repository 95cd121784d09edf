#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""tests/soak.py - a long run of everything at once against one daemon:
well-behaved loads on every transport, the operator's changes, and abusive
clients, with the daemon's memory and descriptors sampled throughout.

    /usr/bin/python3 tests/soak.py [--build build-main] [--seconds 600]
                                   [--device cpu|fake] [--out DIR]

What runs, each in its own thread until the time is up:
  loads    mlpd-bench in 5 s rounds: inline f32 and shared-memory bf16 on
           "digits", OIP binary, OIP system shared memory and OIP JSON on
           "wide", inline on "churn",
           and 1 ms deadlines on "digits". A load may see only the statuses
           its line allows (churn: UNAVAILABLE while unloaded; deadlines:
           DEADLINE_EXCEEDED; every line: UNAVAILABLE for overload), and no
           transport failure: what other clients do must not cost it a
           request.
  operator SIGHUP; "wide" rewritten with new weights (a reload under load);
           "churn" unloaded and loaded (native and the OIP repository
           endpoints); info, list, metrics.
  abuse    random bytes, a huge length prefix, frames cut off mid-body,
           malformed and wrongly shaped requests (each answer checked),
           50 pipelined requests and a close without reading, a region
           registered and the connection closed while its request runs,
           HTTP garbage, bad JSON, a huge Content-Length, half-sent headers,
           the checked-in fuzz corpora replayed onto both sockets, a client
           that stalls mid-frame, bursts of connections, and an OIP system
           shared memory object shrunk under its registration (the next
           request through it answered 400, the daemon unharmed).
  monitor  the daemon's RSS, threads and descriptors every second.

At the end, once the clients are gone: the descriptors back to where they
were after start-up, the daemon ready, SIGTERM answered with exit 0 (with
the ASan build: no leak), and no sanitizer report in its log. Prints a
report and exits 0 only when every check held.
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
mc = pb = None  # the client and its messages, imported by main()


def import_client():
    global mc, pb
    try:
        import numpy  # noqa: F401  (the client's regions need it)
        from mlpd_client import client as mc
        from mlpd_client import mlpd_pb2 as pb
    except ImportError as e:  # ctest reads 77 as skipped
        print("SKIP: %s lacks %s (Debian: python3-numpy python3-protobuf)"
              % (sys.executable, e.name))
        sys.exit(77)

ALWAYS_ALLOWED = {"UNAVAILABLE"}  # overload refusals, on every line


class Soak:
    def __init__(self, a):
        self.a = a
        self.out = os.path.abspath(a.out)
        os.makedirs(self.out, exist_ok=True)
        self.sock = os.path.join(self.out, "mlpd.sock")
        self.http = os.path.join(self.out, "http.sock")
        self.models = os.path.join(self.out, "models")
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.failures = []
        self.loads = {}
        self.abuse = {}
        self.ops = {}
        self.samples = []

    # ---- bookkeeping ----
    def fail(self, what):
        with self.lock:
            self.failures.append("%.1f s: %s" % (time.time() - self.t0, what))

    def count(self, table, key, n=1):
        with self.lock:
            table[key] = table.get(key, 0) + n

    def bin(self, name):
        sub = "daemon" if name == "mlpd" else "clients"
        return os.path.join(ROOT, self.a.build, sub, name)

    # ---- set-up ----
    def make_model(self, path, widths, seed):
        tmp = path + ".tmp"
        subprocess.run([sys.executable, os.path.join(ROOT, "models",
                                                     "make_model.py"),
                        "--widths", widths, "--dtype", "F32", "--seed",
                        str(seed), "-o", tmp], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.replace(tmp, path)

    def start(self):
        os.makedirs(self.models, exist_ok=True)
        for f in (self.sock, self.http):
            if os.path.exists(f):
                os.unlink(f)
        shutil.copy(os.path.join(ROOT, "models", "digits.safetensors"),
                    os.path.join(self.models, "digits.safetensors"))
        self.make_model(os.path.join(self.models, "wide.safetensors"),
                        "256,128,16", 1)
        self.make_model(os.path.join(self.models, "churn.safetensors"),
                        "32,16,8", 2)
        env = dict(os.environ)
        args = [self.bin("mlpd"), "serve", "--model-dir", self.models,
                "--socket", self.sock, "--http-listen", self.http,
                "--io-threads", "2", "--max-connections", "64",
                "--frame-timeout", "2", "--max-frame", "4194304",
                "--http-max-body", "4194304", "--max-regions", "8",
                "--http-allow-shm",
                "--max-batch", "64", "--log-level", "warn"]
        if self.a.device == "fake":
            plug = os.path.join(ROOT, self.a.build, "tests", "plugins")
            env["MLPD_PLUGIN_DIR"] = os.path.join(plug, "fake")
            env["LD_LIBRARY_PATH"] = os.path.join(plug, "driver") + \
                (":" + env["LD_LIBRARY_PATH"]
                 if env.get("LD_LIBRARY_PATH") else "")
            env["MLPD_FAKE_CUDA_DELAY_US"] = "300"
            env["MLPD_FAKE_CUDA_DEPTH"] = "3"
            args += ["--device", "cuda:0,cuda:1", "--io-arena-bytes", "8M"]
        else:
            args += ["--device", "cpu", "--cpu-threads", "1"]
        self.log = open(os.path.join(self.out, "mlpd.log"), "wb")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.t0 = time.time()
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("mlpd exited at start: see %s/mlpd.log"
                                 % self.out)
            if subprocess.run([self.bin("mlpctl"), "-s", self.sock,
                               "ready"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise SystemExit("mlpd not ready in 60 s")
        self.base_fds = self.fds()

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def status(self):
        out = {}
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "Threads"):
                    out[k] = int(v.split()[0])
        return out

    # ---- well-behaved loads ----
    def load_loop(self, name, args, allowed):
        # One run for the whole soak: its connections are made once, before
        # the abusers start, so the connection limit the flood reaches is
        # never this load's to meet.
        cmd = [self.bin("mlpd-bench"), "-s", self.sock, "-D",
               str(self.a.seconds), "-w", "0", "-j"] + args
        p = subprocess.run(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        if p.returncode != 0:
            self.fail("%s: mlpd-bench exited %d: %s" % (
                name, p.returncode, p.stderr.decode()[-300:]))
            return
        r = json.loads(p.stdout)
        self.count(self.loads, name + " requests", r["requests"])
        self.count(self.loads, name + " ok", r["ok"])
        for st, n in r.get("errors_by_status", {}).items():
            self.count(self.loads, "%s %s" % (name, st), n)
            if st not in allowed | ALWAYS_ALLOWED:
                self.fail("%s: %d answered %s" % (name, n, st))
        if r["transport_failures"]:
            self.fail("%s: %d transport failures"
                      % (name, r["transport_failures"]))
        self.count(self.loads, name + " p99 ms x1000",
                   int(r["latency_ms"]["p99"] * 1000))

    # ---- the operator ----
    def mlpctl(self, *args):
        # The abusers' flood may hold every connection for a moment.
        for _ in range(50):
            p = subprocess.run([self.bin("mlpctl"), "-s", self.sock] +
                               list(args), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
            if b"--max-connections" not in p.stderr:
                return p
            time.sleep(0.1)
        return p

    def http_req(self, method, path, body=b"", timeout=10):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.http)
            s.sendall(b"%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                      b"Connection: close\r\n\r\n" % (method, path, len(body))
                      + body)
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        finally:
            s.close()
        head = data.split(b"\r\n", 1)[0].split()
        code = int(head[1]) if len(head) > 1 else 0
        return code, data.partition(b"\r\n\r\n")[2]

    def operator(self):
        step = 0
        while not self.stop.wait(1.0):
            k = step % 6
            step += 1
            try:
                if k == 0:
                    self.proc.send_signal(signal.SIGHUP)
                    self.count(self.ops, "SIGHUP")
                elif k == 1:
                    self.make_model(os.path.join(self.models,
                                                 "wide.safetensors"),
                                    "256,128,16", 100 + step)
                    self.proc.send_signal(signal.SIGHUP)
                    self.count(self.ops, "wide rewritten + SIGHUP")
                elif k == 2:
                    p = self.mlpctl("unload", "churn")
                    self.count(self.ops, "unload churn (native) rc=%d"
                               % p.returncode)
                elif k == 3:
                    p = self.mlpctl("load", "churn")
                    self.count(self.ops, "load churn (native) rc=%d"
                               % p.returncode)
                elif k == 4:
                    c1, _ = self.http_req(
                        b"POST", b"/v2/repository/models/churn/unload")
                    time.sleep(0.3)
                    c2, _ = self.http_req(
                        b"POST", b"/v2/repository/models/churn/load")
                    self.count(self.ops, "OIP unload/load churn %d/%d"
                               % (c1, c2))
                else:
                    for args in (("info",), ("health",), ("metrics",)):
                        p = self.mlpctl(*args)
                        if p.returncode != 0:
                            self.fail("mlpctl %s: rc %d %s" % (
                                args[0], p.returncode, p.stderr[-200:]))
                    code, body = self.http_req(b"GET", b"/metrics")
                    if code != 200:
                        self.fail("GET /metrics: %d" % code)
                    # Triton's statistics (every I/O thread's counters,
                    # merged under load) and a model's configuration (503
                    # while it switches to a reloaded file is an answer).
                    for path, ok in ((b"/v2/models/stats", (200,)),
                                     (b"/v2/models/wide/config", (200, 503))):
                        code, body = self.http_req(b"GET", path)
                        if code not in ok:
                            self.fail("GET %s: %d" % (path.decode(), code))
                        json.loads(body)
                    self.count(self.ops, "info/health/metrics/stats")
            except Exception as e:  # a broken operator step is a failure
                self.fail("operator step %d: %r" % (k, e))

    # ---- abuse ----
    def connect(self, path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(path)
        return s

    @staticmethod
    def frame(msg):
        body = msg.SerializeToString()
        return mc._varint(len(body)) + body

    def read_response(self, s):
        buf = b""
        while True:
            n, shift, i = 0, 0, 0
            while i < len(buf):
                b = buf[i]
                n |= (b & 0x7F) << shift
                shift += 7
                i += 1
                if not b & 0x80:
                    break
            else:
                i = -1
            if i > 0 and len(buf) >= i + n:
                r = pb.Response()
                r.ParseFromString(buf[i:i + n])
                return r
            chunk = s.recv(65536)
            if not chunk:
                return None
            buf += chunk

    def infer_msg(self, rid, rows, cols, model="digits"):
        req = pb.Request()
        req.id = rid
        req.infer.model = model
        req.infer.input.dtype = pb.DTYPE_F32
        req.infer.input.shape.extend([rows, cols])
        req.infer.input.data = bytes(rows * cols * 4)
        return req

    def expect(self, kind, r, status, words=()):
        if r is not None and r.id == 0 and r.status == pb.RESOURCE_EXHAUSTED:
            self.count(self.abuse, "refused at the connection limit")
        elif r is None:
            self.fail("%s: no answer" % kind)
        elif r.status != status or any(w not in r.message for w in words):
            self.fail("%s: got %s %r, want %s" % (
                kind, pb.Status.Name(r.status), r.message,
                pb.Status.Name(status)))

    def corpus(self, name):
        d = os.path.join(ROOT, "tests", "fuzz", "corpus", name)
        return [os.path.join(d, f) for f in sorted(os.listdir(d))]

    def abuse_once(self, rng, corpora):
        kind = rng.choice([
            "random bytes", "huge length", "cut frame", "wrong shape",
            "bad message", "pipeline and leave", "region and leave",
            "http garbage", "http bad json", "http huge body",
            "http half headers", "corpus native", "corpus http", "stall",
            "many connections"] +
            (["http shm shrink"] if os.access("/dev/shm", os.W_OK) else []))
        self.count(self.abuse, kind)
        if kind == "random bytes":
            with self.connect(self.sock) as s:
                s.sendall(rng.randbytes(rng.randint(1, 4096)))
        elif kind == "huge length":
            with self.connect(self.sock) as s:
                s.sendall(mc._varint(1 << 40))
                self.expect(kind, self.read_response(s),
                            pb.RESOURCE_EXHAUSTED)
        elif kind == "cut frame":
            with self.connect(self.sock) as s:
                f = self.frame(self.infer_msg(7, 16, 64))
                s.sendall(f[:rng.randint(1, len(f) - 1)])
        elif kind == "wrong shape":
            with self.connect(self.sock) as s:
                s.sendall(self.frame(self.infer_msg(9, 3, 65)))
                self.expect(kind, self.read_response(s),
                            pb.INVALID_ARGUMENT)
        elif kind == "bad message":
            with self.connect(self.sock) as s:
                junk = bytes([0x12, 0x05]) + rng.randbytes(5)
                s.sendall(mc._varint(len(junk)) + junk)
                r = self.read_response(s)
                if r is not None and r.id == 0:
                    self.expect(kind, r, pb.INVALID_ARGUMENT)
                    return
                if r is None or r.status == pb.OK:
                    self.fail("%s: %r" % (kind, r))
                # The connection stays after an undecodable frame.
                req = pb.Request()
                req.id = 11
                req.health.SetInParent()
                s.sendall(self.frame(req))
                self.expect(kind + " then health", self.read_response(s),
                            pb.OK)
        elif kind == "pipeline and leave":
            with self.connect(self.sock) as s:
                s.sendall(b"".join(self.frame(self.infer_msg(i, 4, 64))
                                   for i in range(1, 51)))
        elif kind == "region and leave":
            c = mc.Client(self.sock, timeout=10)
            try:
                reg = c.register_region("r", 64 * 64 * 4 + 64 * 10 * 4)
                x = reg.array("f32", (64, 64))
                x[:] = 0.5
                out = reg.array("f32", (64, 10), offset=64 * 64 * 4)
                c.send(x, id=1, out=out)
            finally:
                c.close()
                try:
                    reg.close()
                except Exception:
                    pass
        elif kind == "http garbage":
            with self.connect(self.http) as s:
                s.sendall(rng.randbytes(rng.randint(1, 2048)))
        elif kind == "http bad json":
            code, body = self.http_req(
                b"POST", b"/v2/models/wide/infer", b'{"inputs": [{"name":')
            if code != 400 or b'"error"' not in body:
                self.fail("%s: %d %r" % (kind, code, body[:200]))
        elif kind == "http huge body":
            with self.connect(self.http) as s:
                s.sendall(b"POST /v2/models/wide/infer HTTP/1.1\r\nHost: x"
                          b"\r\nContent-Length: 99999999999\r\n\r\n")
                data = s.recv(4096)
                if not data.startswith(b"HTTP/1.1 413"):
                    self.fail("%s: %r" % (kind, data[:100]))
        elif kind == "http half headers":
            with self.connect(self.http) as s:
                s.sendall(b"POST /v2/models/wide/infer HTTP/1.1\r\nContent-")
        elif kind == "corpus native":
            with self.connect(self.sock) as s:
                for f in rng.sample(corpora["rpc"], 5):
                    body = open(f, "rb").read()
                    s.sendall(mc._varint(len(body)) + body)
        elif kind == "corpus http":
            f = rng.choice(corpora["http"])
            with self.connect(self.http) as s:
                s.sendall(open(f, "rb").read())
        elif kind == "stall":
            with self.connect(self.sock) as s:
                s.sendall(self.frame(self.infer_msg(5, 2, 64))[:10])
                # The frame timeout (2 s) must close it.
                s.settimeout(10)
                t = time.time()
                r = self.read_response(s)
                if time.time() - t > 8:
                    self.fail("%s: not closed in 8 s" % kind)
                if r is not None and r.status == pb.OK:
                    self.fail("%s: answered OK" % kind)
        elif kind == "http shm shrink":
            # A registered object shrinks under the daemon: that request
            # fails with a message, the daemon (which never maps it) lives.
            name = "soak-%d-%d" % (os.getpid(), rng.randrange(1 << 30))
            path = "/dev/shm/" + name
            rows = 4
            with open(path, "w+b") as f:
                f.write(struct.pack("%df" % (rows * 256),
                                    *([0.25] * (rows * 256))))
                f.truncate(rows * 256 * 4 + rows * 16 * 4)
            try:
                reg = b"/v2/systemsharedmemory/region/%s" % name.encode()
                code, body = self.http_req(
                    b"POST", reg + b"/register",
                    b'{"key":"/%s","byte_size":%d}'
                    % (name.encode(), rows * 256 * 4 + rows * 16 * 4))
                if code != 200:
                    self.fail("%s: register %d %r" % (kind, code, body[:200]))
                    return
                req = (b'{"inputs":[{"name":"input","datatype":"FP32",'
                       b'"shape":[%d,256],"parameters":{'
                       b'"shared_memory_region":"%s",'
                       b'"shared_memory_byte_size":%d}}],'
                       b'"outputs":[{"name":"output","parameters":{'
                       b'"shared_memory_region":"%s",'
                       b'"shared_memory_offset":%d,'
                       b'"shared_memory_byte_size":%d}}]}'
                       % (rows, name.encode(), rows * 256 * 4, name.encode(),
                          rows * 256 * 4, rows * 16 * 4))
                code, body = self.http_req(b"POST", b"/v2/models/wide/infer",
                                           req)
                if code not in (200, 503):
                    self.fail("%s: %d %r" % (kind, code, body[:200]))
                os.truncate(path, 100)
                code, body = self.http_req(b"POST", b"/v2/models/wide/infer",
                                           req)
                if code != 400 or b"shrank" not in body:
                    self.fail("%s: after shrinking %d %r"
                              % (kind, code, body[:200]))
                self.http_req(b"POST", reg + b"/unregister")
            finally:
                os.unlink(path)
        elif kind == "many connections":
            # Below --max-connections with everything else (7 loads, 16
            # per abuser, the operator): the loads, which connect once at
            # the start, can never meet the limit, whatever the timing.
            conns = []
            try:
                for _ in range(16):
                    conns.append(self.connect(self.sock))
            finally:
                for s in conns:
                    s.close()

    def abuser(self, seed):
        rng = random.Random(seed)
        corpora = {"rpc": self.corpus("fuzz_rpc"),
                   "http": self.corpus("fuzz_oip_http") +
                   self.corpus("fuzz_http")}
        while not self.stop.is_set():
            try:
                self.abuse_once(rng, corpora)
            except (OSError, mc.MlpdError) as e:
                # The daemon may close an abusive connection at any point.
                self.count(self.abuse, "closed on us (%s)"
                           % type(e).__name__)

    # ---- the monitor ----
    def monitor(self):
        while not self.stop.wait(1.0):
            if self.proc.poll() is not None:
                self.fail("mlpd exited with %d" % self.proc.returncode)
                self.stop.set()
                return
            st = self.status()
            self.samples.append((time.time() - self.t0, st["VmRSS"],
                                 st["Threads"], self.fds()))

    def wait_connections(self, nloads):
        """Waits until the loads' native connections are up, so that the
        abuse starts on a loaded daemon (7 of them, and mlpctl's own)."""
        deadline = time.time() + 30
        n = 0
        while time.time() < deadline:
            p = self.mlpctl("metrics")
            for line in p.stdout.decode().splitlines():
                if line.startswith("mlpd_connections "):
                    n = int(float(line.split()[1]))
            if n >= 8:
                return
            time.sleep(0.05)
        self.fail("the %d loads' connections did not come up (%d)"
                  % (nloads, n))

    # ---- the run ----
    def run(self):
        self.start()
        self.end = time.time() + self.a.seconds
        loads = [
            ("digits inline", ["-m", "digits", "-c", "3", "-d", "4",
                               "-r", "8"], set()),
            ("digits shm bf16", ["-m", "digits", "--shm", "--dtype",
                                 "bf16", "-c", "2", "-d", "4", "-r", "16"],
             set()),
            ("wide OIP binary", ["-m", "wide", "--http", "unix:" + self.http,
                                 "-c", "2", "-d", "4", "-r", "4"], set()),
            ("wide OIP JSON", ["-m", "wide", "--http", "unix:" + self.http,
                               "--http-json", "-c", "1", "-d", "2", "-r",
                               "2"], set()),
            ("churn inline", ["-m", "churn", "-c", "1", "-d", "2", "-r",
                              "2"], {"NOT_FOUND"}),
            ("digits deadline 1 ms", ["-m", "digits", "-t", "1", "-c", "1",
                                      "-d", "8", "-r", "1"],
             {"DEADLINE_EXCEEDED"}),
        ]
        if os.access("/dev/shm", os.W_OK):  # shm_open's folder
            loads.append(("wide OIP system shm",
                          ["-m", "wide", "--http", "unix:" + self.http,
                           "--shm", "-c", "1", "-d", "4", "-r", "4"], set()))
        threads = [threading.Thread(target=self.load_loop, args=l)
                   for l in loads]
        threads.append(threading.Thread(target=self.operator))
        threads += [threading.Thread(target=self.abuser, args=(self.a.seed
                                                               + i,))
                    for i in range(self.a.abusers)]
        mon = threading.Thread(target=self.monitor)
        for t in threads[:len(loads)]:
            t.start()
        self.wait_connections(len(loads))
        for t in threads[len(loads):] + [mon]:
            t.start()
        while time.time() < self.end and not self.stop.is_set():
            time.sleep(0.5)
        self.stop.set()
        for t in threads + [mon]:
            t.join()
        self.finish()

    def finish(self):
        alive = self.proc.poll() is None
        end_fds = None
        if alive:
            # The clients are gone: wait for the daemon to close their
            # connections (and unmap their regions).
            deadline = time.time() + 30
            while time.time() < deadline:
                end_fds = self.fds()
                if end_fds <= self.base_fds:
                    break
                time.sleep(0.2)
            if end_fds > self.base_fds:
                self.fail("descriptors: %d after the clients left, %d "
                          "after start-up" % (end_fds, self.base_fds))
            if self.mlpctl("ready").returncode != 0:
                self.fail("not ready at the end")
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = "killed after 60 s"
            if rc != 0:
                self.fail("mlpd exit status %s after SIGTERM" % rc)
        self.log.close()
        log = open(os.path.join(self.out, "mlpd.log"), "rb").read()
        for w in (b"AddressSanitizer", b"LeakSanitizer", b"runtime error",
                  b"ThreadSanitizer"):
            if w in log:
                self.fail("sanitizer report in mlpd.log (%s)" % w.decode())
        self.report(end_fds)

    def report(self, end_fds):
        print("soak: %d s, device %s, build %s, %d abusers"
              % (self.a.seconds, self.a.device, self.a.build,
                 self.a.abusers))
        print("loads:")
        for k in sorted(self.loads):
            print("  %-40s %d" % (k, self.loads[k]))
        print("operator:")
        for k in sorted(self.ops):
            print("  %-40s %d" % (k, self.ops[k]))
        print("abuse:")
        for k in sorted(self.abuse):
            print("  %-40s %d" % (k, self.abuse[k]))
        if self.samples:
            n = len(self.samples)
            first = self.samples[:max(1, n // 10)]
            last = self.samples[-max(1, n // 10):]
            avg = lambda s, i: sum(x[i] for x in s) / len(s)  # noqa: E731
            print("daemon: RSS %.1f MiB in the first tenth, %.1f in the "
                  "last (max %.1f); threads %d-%d; descriptors %d after "
                  "start-up, max %d, %s at the end"
                  % (avg(first, 1) / 1024, avg(last, 1) / 1024,
                     max(x[1] for x in self.samples) / 1024,
                     min(x[2] for x in self.samples),
                     max(x[2] for x in self.samples), self.base_fds,
                     max(x[3] for x in self.samples), end_fds))
            with open(os.path.join(self.out, "samples.csv"), "w") as f:
                f.write("seconds,rss_kib,threads,fds\n")
                for s in self.samples:
                    f.write("%.1f,%d,%d,%d\n" % s)
        if self.failures:
            print("FAILED (%d):" % len(self.failures))
            for f in self.failures[:50]:
                print("  " + f)
        else:
            print("PASSED")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-main")
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--device", choices=("cpu", "fake"), default="cpu")
    ap.add_argument("--abusers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import_client()
    if a.out is None:
        a.out = os.path.join(ROOT, a.build, "soak-" + a.device)
    s = Soak(a)
    try:
        s.run()
    finally:
        if getattr(s, "proc", None) is not None and s.proc.poll() is None:
            s.proc.kill()
    sys.exit(1 if s.failures else 0)


if __name__ == "__main__":
    main()
