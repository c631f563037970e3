#!/bin/bash
# Entrypoint of the test lab's Redis image. It honours the official redis
# image's contract: the command is redis-server with its options (a
# leading option or a *.conf file gets redis-server put in front), data in
# /data, the server runs as the redis user and listens on port 6379 of all
# interfaces with protected mode off unless a configuration file says
# otherwise. A password comes from --requirepass, from an ACL file
# (--aclfile) or from REDIS_PASSWORD (or REDIS_PASSWORD_FILE), which is
# handed to the server on its standard input rather than on its command
# line.
set -Eeuo pipefail

if [[ ${1:-} == -* || ${1:-} == *.conf ]]; then
	set -- redis-server "$@"
fi
if [[ ${1:-} != redis-server ]]; then
	exec "$@"
fi

if [[ $(id -u) == 0 ]]; then
	find . \! -user redis -exec chown redis '{}' +
	exec setpriv --reuid=redis --regid=redis --init-groups "${BASH_SOURCE[0]}" "$@"
fi

if [[ -n ${REDIS_PASSWORD:-} && -n ${REDIS_PASSWORD_FILE:-} ]]; then
	echo >&2 'error: both REDIS_PASSWORD and REDIS_PASSWORD_FILE are set'
	exit 1
fi
if [[ -n ${REDIS_PASSWORD_FILE:-} ]]; then
	REDIS_PASSWORD=$(<"$REDIS_PASSWORD_FILE")
fi
unset REDIS_PASSWORD_FILE

# The official image's server is built with protected mode off.
if [[ ${2:-} != *.conf ]]; then
	set -- "$1" --protected-mode no "${@:2}"
fi
umask 0077
if [[ -n ${REDIS_PASSWORD:-} ]]; then
	pw=${REDIS_PASSWORD//\\/\\\\}
	pw=${pw//\"/\\\"}
	unset REDIS_PASSWORD
	exec "$@" - <<<"requirepass \"$pw\""
fi
exec "$@"
