-- +goose Up

-- An application's published port: the proxy of its server listens on
-- publish_bind:publish_port and serves the application there. NULL port:
-- none. One application per port on a server, whatever the bind (a
-- wildcard address overlaps every other one).
ALTER TABLE applications ADD COLUMN publish_bind TEXT NOT NULL DEFAULT '';
ALTER TABLE applications ADD COLUMN publish_port INTEGER;
CREATE UNIQUE INDEX applications_publish_port ON applications (server_id, publish_port) WHERE publish_port IS NOT NULL;

-- +goose Down
DROP INDEX applications_publish_port;
ALTER TABLE applications DROP COLUMN publish_port;
ALTER TABLE applications DROP COLUMN publish_bind;
