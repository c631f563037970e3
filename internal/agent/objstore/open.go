package objstore

import (
	"fmt"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Open returns the store a job's payload names, with the credentials of
// its secrets.
func Open(st agentproto.BackupStorage, secrets map[string]string) (Store, error) {
	switch st.Provider {
	case agentproto.BackupProviderS3:
		return NewS3(S3Config{Endpoint: st.Endpoint, Region: st.Region, Bucket: st.Bucket, Prefix: st.Prefix,
			AccessKeyID: secrets[agentproto.SecretS3AccessKeyID], SecretAccessKey: secrets[agentproto.SecretS3SecretAccessKey],
			PathStyle: st.PathStyle, TLS: st.TLS, CA: st.CA})
	}
	return nil, fmt.Errorf("this agent cannot store backups with provider %q", st.Provider)
}
