#!/usr/bin/python3
"""One TCP connection between two cluster hosts: SIZE bytes one way (uni) or
both ways at once (bidi); prints MB/s per direction. Used by run.sh."""
import socket, sys, threading, time
mode, role, addr, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
buf = b"x" * (1 << 20)
def sender(s):
    left = size
    while left > 0:
        left -= s.send(buf[:min(left, len(buf))])
def receiver(s, out):
    got = 0
    t0 = time.time()
    while got < size:
        d = s.recv(1 << 20)
        if not d: break
        got += len(d)
    out.append(time.time() - t0)
if role == "server":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, 5555)); ls.listen(1); s, _ = ls.accept()
else:
    s = socket.create_connection((addr, 5555))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
out = []
t0 = time.time()
th = []
if mode == "bidi" or role == "client": th.append(threading.Thread(target=sender, args=(s,)))
if mode == "bidi" or role == "server": th.append(threading.Thread(target=receiver, args=(s, out)))
for t in th: t.start()
for t in th: t.join()
el = time.time() - t0
print(role, mode, f"{size/el/1e6:.1f} MB/s over {el:.3f}s", f"recv {size/out[0]/1e6:.1f} MB/s" if out else "")
s.close()
