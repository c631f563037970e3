package objstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Open returns the store a job's payload names, with the credentials of
// its secrets. A cloud drive folder is found, or made, on the drive.
func Open(ctx context.Context, st agentproto.BackupStorage, secrets map[string]string) (Store, error) {
	switch st.Provider {
	case agentproto.BackupProviderS3:
		return NewS3(S3Config{Endpoint: st.Endpoint, Region: st.Region, Bucket: st.Bucket, Prefix: st.Prefix,
			AccessKeyID: secrets[agentproto.SecretS3AccessKeyID], SecretAccessKey: secrets[agentproto.SecretS3SecretAccessKey],
			PathStyle: st.PathStyle, TLS: st.TLS, CA: st.CA})
	case agentproto.BackupProviderCloudDrive:
		token := secrets[agentproto.SecretCloudDriveToken]
		if token == "" {
			return nil, errors.New("the job carries no cloud drive access token")
		}
		return OpenDrive(ctx, DriveConfig{APIURL: st.APIURL, Token: token, Folder: st.Folder})
	}
	return nil, fmt.Errorf("this agent cannot store backups with provider %q", st.Provider)
}
