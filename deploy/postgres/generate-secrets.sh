#!/bin/sh
# Writes the three Secrets' inputs this component reads, each password random and new:
#   postgres.env  POSTGRES_USER, POSTGRES_DB, POSTGRES_PASSWORD (the database's)
#   db.env        url: Voda's store URL with that password
#   tokens.env    tokens: VODA_TOKENS, one administrator `admin` with a random token;
#                 report_key: VODA_REPORT_KEY, the key report tokens are signed with (an
#                 older tokens.env without it: add a line report_key=<64 random hex digits>)
# Run once before the first `kubectl apply -k deploy/`; it never overwrites a file (keep
# them out of version control; delete them to rotate, then apply and restart Voda).
set -eu
cd "$(dirname "$0")"
random() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
for file in postgres.env db.env tokens.env; do
  if [ -e "$file" ]; then
    echo "deploy/postgres/$file exists; not overwritten" >&2
    exit 1
  fi
done
umask 077
password=$(random)
printf 'POSTGRES_USER=voda\nPOSTGRES_DB=voda\nPOSTGRES_PASSWORD=%s\n' "$password" > postgres.env
printf 'url=postgresql+psycopg://voda:%s@voda-postgres:5432/voda\n' "$password" > db.env
printf 'tokens=admin:%s:admin\nreport_key=%s\n' "$(random)" "$(random)" > tokens.env
echo "wrote deploy/postgres/postgres.env, db.env and tokens.env (the admin token is in tokens.env)"
