"""client.py sends one GET with urllib3's defaults (Retry(3), which honours Retry-After on 413,
429 and 503) and prints the final status, or why it gave up. Usage: python3 client.py URL."""
import sys

import urllib3

try:
    print(urllib3.request("GET", sys.argv[1]).status)
except urllib3.exceptions.MaxRetryError as e:
    print("gave up:", e.reason)
