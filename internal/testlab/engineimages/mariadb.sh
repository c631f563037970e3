#!/bin/bash
# Entrypoint of the test lab's MariaDB image. It honours the official
# mariadb image's contract: MARIADB_ROOT_PASSWORD,
# MARIADB_ALLOW_EMPTY_ROOT_PASSWORD, MARIADB_RANDOM_ROOT_PASSWORD,
# MARIADB_ROOT_HOST (default %), MARIADB_DATABASE, MARIADB_USER and
# MARIADB_PASSWORD, each also under its MYSQL_ name (the MARIADB_ one
# wins) and as NAME_FILE; the data directory is made on the first start
# only, with the scripts of /docker-entrypoint-initdb.d (*.sh, *.sql,
# *.sql.gz) run once; the server runs as the mysql user and listens on
# port 3306 of all interfaces, root reachable over TCP with its password.
set -Eeuo pipefail

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

# sql_string quotes $1 as an SQL string literal.
sql_string() {
	local s=${1//\\/\\\\}
	s=${s//$'\n'/\\n}
	printf "'%s'" "${s//\'/\\\'}"
}

# sql_name quotes $1 as an SQL identifier.
sql_name() {
	# shellcheck disable=SC2016 # literal backticks
	printf '`%s`' "${1//\`/\`\`}"
}

if [[ ${1:-} == -* ]]; then
	set -- mariadbd "$@"
fi
if [[ ${1:-} != mariadbd && ${1:-} != mysqld ]]; then
	exec "$@"
fi

# The data directory and socket the server would use with these options.
# The settings are the unindented lines of the help text.
settings=$("$@" --verbose --help 2>/dev/null)
datadir=$(awk '/^[^ \t]/ && $1 == "datadir" { print $2; exit }' <<<"$settings")
datadir=${datadir%/}
socket=$(awk '/^[^ \t]/ && $1 == "socket" { print $2; exit }' <<<"$settings")
if [[ $datadir != /?* || $socket != /?* ]]; then
	echo >&2 "error: cannot tell the server's data directory ($datadir) and socket ($socket) from: $* --verbose --help"
	exit 1
fi

if [[ $(id -u) == 0 ]]; then
	mkdir -p "$datadir" "$(dirname "$socket")"
	chown -R mysql:mysql "$datadir" "$(dirname "$socket")"
	exec setpriv --reuid=mysql --regid=mysql --init-groups "${BASH_SOURCE[0]}" "$@"
fi

for v in ROOT_PASSWORD ALLOW_EMPTY_ROOT_PASSWORD RANDOM_ROOT_PASSWORD ROOT_HOST DATABASE USER PASSWORD; do
	file_env "MYSQL_$v"
	file_env "MARIADB_$v" "$(printenv "MYSQL_$v" || true)"
done
: "${MARIADB_ROOT_HOST:=%}"

if [[ ! -d $datadir/mysql ]]; then
	if [[ -z $MARIADB_ROOT_PASSWORD && -z $MARIADB_ALLOW_EMPTY_ROOT_PASSWORD && -z $MARIADB_RANDOM_ROOT_PASSWORD ]]; then
		echo >&2 'error: the database is uninitialized and no root password option is set.'
		echo >&2 '       Set one of MARIADB_ROOT_PASSWORD, MARIADB_ALLOW_EMPTY_ROOT_PASSWORD or MARIADB_RANDOM_ROOT_PASSWORD.'
		exit 1
	fi
	if [[ -n $MARIADB_USER && $MARIADB_USER == root ]]; then
		echo >&2 'error: MARIADB_USER="root" is the root account; set MARIADB_ROOT_PASSWORD instead.'
		exit 1
	fi
	if [[ -n $MARIADB_RANDOM_ROOT_PASSWORD ]]; then
		MARIADB_ROOT_PASSWORD=$(head -c 24 /dev/urandom | base64)
		echo "GENERATED ROOT PASSWORD: $MARIADB_ROOT_PASSWORD"
	fi

	mariadb-install-db --datadir="$datadir" --rpm --auth-root-authentication-method=normal \
		--skip-test-db --default-time-zone=SYSTEM --skip-log-bin --expire-logs-days=0 \
		--loose-innodb_buffer_pool_load_at_startup=0 --loose-innodb_buffer_pool_dump_at_shutdown=0 "${@:2}"

	# A server on the socket only, for the accounts, database and scripts.
	"$@" --skip-networking --default-time-zone=SYSTEM --socket="$socket" --wsrep_on=OFF \
		--expire-logs-days=0 --loose-innodb_buffer_pool_load_at_startup=0 --skip-ssl &
	pid=$!
	mariadb=(mariadb --protocol=socket --socket="$socket" -uroot --binary-mode)
	for i in {300..0}; do
		if "${mariadb[@]}" --database=mysql -e 'SELECT 1' >/dev/null 2>&1; then
			break
		fi
		if ! kill -0 "$pid" 2>/dev/null || [[ $i == 0 ]]; then
			echo >&2 'error: the initial server did not start'
			exit 1
		fi
		sleep 0.1
	done

	{
		echo 'SET @@SESSION.SQL_LOG_BIN=0;'
		echo "SET @@SESSION.SQL_MODE=REPLACE(@@SESSION.SQL_MODE, 'NO_BACKSLASH_ESCAPES', '');"
		echo "DROP USER IF EXISTS root@'127.0.0.1', root@'::1';"
		printf '%s\n' "EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS root@\\'', @@hostname, '\\'');"
		echo "SET PASSWORD FOR 'root'@'localhost' = PASSWORD($(sql_string "$MARIADB_ROOT_PASSWORD"));"
		if [[ $MARIADB_ROOT_HOST != localhost ]]; then
			echo "CREATE USER 'root'@$(sql_string "$MARIADB_ROOT_HOST") IDENTIFIED BY $(sql_string "$MARIADB_ROOT_PASSWORD");"
			echo "GRANT ALL ON *.* TO 'root'@$(sql_string "$MARIADB_ROOT_HOST") WITH GRANT OPTION;"
			echo "GRANT PROXY ON ''@'%' TO 'root'@$(sql_string "$MARIADB_ROOT_HOST") WITH GRANT OPTION;"
		fi
		if [[ -n $MARIADB_DATABASE ]]; then
			echo "CREATE DATABASE IF NOT EXISTS $(sql_name "$MARIADB_DATABASE");"
		fi
		if [[ -n $MARIADB_USER && -n $MARIADB_PASSWORD ]]; then
			echo "CREATE USER $(sql_string "$MARIADB_USER")@'%' IDENTIFIED BY $(sql_string "$MARIADB_PASSWORD");"
			if [[ -n $MARIADB_DATABASE ]]; then
				echo "GRANT ALL ON $(sql_name "$MARIADB_DATABASE").* TO $(sql_string "$MARIADB_USER")@'%';"
			fi
		fi
	} | "${mariadb[@]}" --database=mysql

	mariadb+=(--password="$MARIADB_ROOT_PASSWORD")
	if [[ -n $MARIADB_DATABASE ]]; then
		mariadb+=(--database="$MARIADB_DATABASE")
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case $f in
		*.sh) echo "running $f" && bash "$f" ;;
		*.sql) echo "running $f" && "${mariadb[@]}" <"$f" ;;
		*.sql.gz) echo "running $f" && gunzip -c "$f" | "${mariadb[@]}" ;;
		*) [[ -e $f ]] && echo "ignoring $f" ;;
		esac
	done

	kill "$pid"
	wait "$pid"
	echo 'MariaDB init process complete; ready for start up.'
fi

exec "$@"
