package console_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

func TestRedisKV(t *testing.T) {
	r := testlab.StartRedis(t, nil)
	target := agentproto.DBTarget{InstanceID: "db_test", Engine: agentproto.EngineRedis, Host: "127.0.0.1", Port: r.Port, Username: "default"}
	c := r.Client(t)
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Set(ctx, "app:str", strings.Repeat("a", 100), time.Hour).Err())
	must(c.HSet(ctx, "app:hash", "f1", "v1", "f2", "v2", "f3", "v3").Err())
	must(c.RPush(ctx, "app:list", "l1", "l2", "l3").Err())
	must(c.SAdd(ctx, "app:set", "s1", "s2").Err())
	must(c.ZAdd(ctx, "app:zset", redis.Z{Score: 2, Member: "b"}, redis.Z{Score: 1, Member: "a"}).Err())
	must(c.XAdd(ctx, &redis.XAddArgs{Stream: "app:stream", ID: "1-1", Values: []string{"k", "v"}}).Err())
	must(c.Set(ctx, "other", "x", 0).Err())
	must(c.Do(ctx, "ACL", "SETUSER", "reader", "on", ">secret-pw", "~app:*", "-@all", "+@read").Err())

	kv := func(p agentproto.DBKVPayload) agenttest.Outcome {
		p.Target = target
		return runJob(t, agentproto.JobDBKV, p, r.Password)
	}

	var res agentproto.DBKVResult
	kv(agentproto.DBKVPayload{Action: agentproto.KVInfo}).OK(t, &res)
	if res.Info["server"]["redis_version"] == "" || res.Info["keyspace"]["db0"] == "" {
		t.Errorf("info = %v", res.Info)
	}

	// A scan by cursor to its end finds exactly the matching keys.
	var found []string
	cursor := ""
	for {
		res = agentproto.DBKVResult{}
		kv(agentproto.DBKVPayload{Action: agentproto.KVScan, Cursor: cursor, Match: "app:*", Count: 2}).OK(t, &res)
		for _, k := range res.Keys {
			found = append(found, k.Key+"="+k.Type)
			if k.Key == "app:str" && (k.TTLSeconds <= 0 || k.TTLSeconds > 3600) {
				t.Errorf("app:str ttl = %d", k.TTLSeconds)
			}
			if k.Key == "app:list" && k.TTLSeconds != -1 {
				t.Errorf("app:list ttl = %d, want -1", k.TTLSeconds)
			}
		}
		if cursor = res.Cursor; cursor == "0" {
			break
		}
	}
	slices.Sort(found)
	if got, want := strings.Join(found, " "), "app:hash=hash app:list=list app:set=set app:str=string app:stream=stream app:zset=zset"; got != want {
		t.Errorf("scan = %s, want %s", got, want)
	}

	get := func(key string, items, bytes int) *agentproto.KVValue {
		var res agentproto.DBKVResult
		kv(agentproto.DBKVPayload{Action: agentproto.KVGet, Key: key, MaxItems: items, MaxBytes: bytes}).OK(t, &res)
		return res.Value
	}
	if v := get("app:str", 0, 10); v.String == nil || *v.String != "aaaaaaaaaa" || v.Size != 100 || !v.Truncated || v.TTLSeconds <= 0 {
		t.Errorf("string = %+v", v)
	}
	if v := get("app:hash", 2, 0); len(v.Hash) != 2 || v.Size != 3 || !v.Truncated {
		t.Errorf("hash = %+v", v)
	}
	if v := get("app:list", 0, 0); !slices.Equal(v.List, []string{"l1", "l2", "l3"}) || v.Size != 3 || v.Truncated || v.TTLSeconds != -1 {
		t.Errorf("list = %+v", v)
	}
	if v := get("app:set", 0, 0); len(v.Set) != 2 || v.Size != 2 || v.Truncated {
		t.Errorf("set = %+v", v)
	}
	if v := get("app:zset", 0, 0); len(v.ZSet) != 2 || v.ZSet[0] != (agentproto.KVScored{Member: "a", Score: 1}) {
		t.Errorf("zset = %+v", v)
	}
	if v := get("app:stream", 0, 0); len(v.Stream) != 1 || v.Stream[0].ID != "1-1" || v.Stream[0].Fields["k"] != "v" {
		t.Errorf("stream = %+v", v)
	}
	if e := kv(agentproto.DBKVPayload{Action: agentproto.KVGet, Key: "missing"}).Failure(t); !strings.Contains(e.Message, "no such key") {
		t.Errorf("get of a missing key: %+v", e)
	}

	res = agentproto.DBKVResult{}
	kv(agentproto.DBKVPayload{Action: agentproto.KVDelete, Keys: []string{"other", "missing"}}).OK(t, &res)
	if res.Deleted == nil || *res.Deleted != 1 {
		t.Errorf("deleted = %v, want 1", res.Deleted)
	}
	if n := c.Exists(ctx, "other", "app:str").Val(); n != 1 {
		t.Errorf("%d of other, app:str exist after the delete, want 1", n)
	}
	if e := kv(agentproto.DBKVPayload{Action: agentproto.KVDelete}).Failure(t); !strings.Contains(e.Message, "needs the keys") {
		t.Errorf("delete without keys: %+v", e)
	}

	res = agentproto.DBKVResult{}
	kv(agentproto.DBKVPayload{Action: agentproto.KVACLList}).OK(t, &res)
	i := slices.IndexFunc(res.ACLUsers, func(u agentproto.KVACLUser) bool { return u.Name == "reader" })
	if i < 0 || !res.ACLUsers[i].Enabled || !slices.Equal(res.ACLUsers[i].KeyPatterns, []string{"app:*"}) || res.ACLUsers[i].Commands != "-@all +@read" {
		t.Errorf("acl users = %+v", res.ACLUsers)
	}
	if strings.Contains(kv(agentproto.DBKVPayload{Action: agentproto.KVACLList}).Text(), "#") {
		t.Error("acl_list returns password hashes")
	}

	// The engine's errors keep its code; SQL jobs are refused.
	if e := runJob(t, agentproto.JobDBKV, agentproto.DBKVPayload{Target: target, Action: agentproto.KVInfo}, "wrong").Failure(t); e.Code != "WRONGPASS" {
		t.Errorf("wrong password: %+v, want WRONGPASS", e)
	}
	if e := query(t, target, r.Password, "SELECT 1", true, 10, 1000).Failure(t); !strings.Contains(e.Message, "not a SQL engine") {
		t.Errorf("query on redis: %+v", e)
	}
	var conn agentproto.DBConnectResult
	runJob(t, agentproto.JobDBConnect, agentproto.DBConnectPayload{Target: target}, r.Password).OK(t, &conn)
	if conn.ServerVersion == "" || conn.TLS {
		t.Errorf("connect = %+v", conn)
	}
}
