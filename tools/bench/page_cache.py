"""Drops a folder's files from the page cache, so that the next read of them reads the disk.

A save through the page cache (DCP's) leaves its files in memory and its load then reads memory,
while a save with O_DIRECT (meshtrain's) leaves nothing there: a load comparison without this
step compares memory with disk. Needs no root (posix_fadvise on each file, after fsync).

    python3 tools/bench/page_cache.py FOLDER...
"""
import os
import sys


def evict(folder):
    for root, _, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        evict(folder)
