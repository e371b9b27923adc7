#!/bin/sh
echo "The Check unit-test library was not found when configure ran: install it" >&2
echo "(tools/install-deps.sh, or apt-get install check) and run ./configure again." >&2
exit 1
