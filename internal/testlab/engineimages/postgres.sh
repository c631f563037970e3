#!/bin/bash
# Entrypoint of the test lab's PostgreSQL image. It honours the official
# postgres image's contract: POSTGRES_PASSWORD, POSTGRES_USER (default
# postgres), POSTGRES_DB (default: the user), POSTGRES_INITDB_ARGS,
# POSTGRES_HOST_AUTH_METHOD (default scram-sha-256), each also as
# NAME_FILE; the cluster in $PGDATA is made on the first start only, with
# the scripts of /docker-entrypoint-initdb.d (*.sh, *.sql, *.sql.gz) run
# once; the server runs as the postgres user and listens on all
# interfaces, password-authenticated for every remote address.
set -Eeuo pipefail

# file_env NAME [DEFAULT] sets NAME from itself, from the file named by
# NAME_FILE, or to DEFAULT.
file_env() {
	local name=$1 file_name=${1}_FILE def=${2:-}
	if [[ -n ${!name:-} && -n ${!file_name:-} ]]; then
		echo >&2 "error: both $name and $file_name are set"
		exit 1
	fi
	local val=$def
	if [[ -n ${!name:-} ]]; then
		val=${!name}
	elif [[ -n ${!file_name:-} ]]; then
		val=$(<"${!file_name}")
	fi
	export "$name=$val"
	unset "$file_name"
}

if [[ ${1:-} == -* ]]; then
	set -- postgres "$@"
fi
if [[ ${1:-} != postgres ]]; then
	exec "$@"
fi

if [[ $(id -u) == 0 ]]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown -R postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 0700 "$PGDATA"
	chmod 3775 /var/run/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

file_env POSTGRES_PASSWORD
file_env POSTGRES_USER postgres
file_env POSTGRES_DB "$POSTGRES_USER"
file_env POSTGRES_INITDB_ARGS
: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"

if [[ ! -s $PGDATA/PG_VERSION ]]; then
	if [[ -z $POSTGRES_PASSWORD && $POSTGRES_HOST_AUTH_METHOD != trust ]]; then
		cat >&2 <<-'EOM'
			error: the database is uninitialized and no superuser password is set.
			       Set POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE), or
			       POSTGRES_HOST_AUTH_METHOD=trust to allow every connection
			       without a password.
		EOM
		exit 1
	fi
	# POSTGRES_INITDB_ARGS is split as a shell would split it.
	eval 'initdb --username="$POSTGRES_USER" --pwfile=<(printf "%s\n" "$POSTGRES_PASSWORD") '"$POSTGRES_INITDB_ARGS"
	printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"

	# A server on the socket only, for the initial database and scripts.
	pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
	export PGPASSWORD=${PGPASSWORD:-$POSTGRES_PASSWORD}
	psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
	if [[ $POSTGRES_DB != postgres ]]; then
		"${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<-'EOSQL'
			CREATE DATABASE :"db" ;
		EOSQL
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case $f in
		*.sh) echo "running $f" && bash "$f" ;;
		*.sql) echo "running $f" && "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
		*.sql.gz) echo "running $f" && gunzip -c "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
		*) [[ -e $f ]] && echo "ignoring $f" ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	unset PGPASSWORD
	echo 'PostgreSQL init process complete; ready for start up.'
fi

exec "$@"
