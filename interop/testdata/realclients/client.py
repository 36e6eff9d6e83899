"""client.py sends one GET with urllib3's defaults (Retry(3), which honours Retry-After on 413,
429 and 503) and prints the final status, or why it gave up. Usage: python3 client.py
[STATUS...] URL: each STATUS given is added to the Retry's status_forcelist, the documented way
to retry a status it does not retry by default (on which it then honours Retry-After too)."""
import sys

import urllib3

retries = None  # the default, Retry(3)
if len(sys.argv) > 2:
    retries = urllib3.util.Retry(3, status_forcelist=[int(s) for s in sys.argv[1:-1]])
try:
    # PoolManager().request is what urllib3.request does (urllib3 2), and exists in urllib3 1.26.
    print(urllib3.PoolManager().request("GET", sys.argv[-1], retries=retries).status)
except urllib3.exceptions.MaxRetryError as e:
    print("gave up:", e.reason)
