package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/picobot/picobot/runtime/blob/s3blob"
	"github.com/picobot/picobot/runtime/cluster"
	"github.com/picobot/picobot/runtime/store/postgres"
)

// migrate is `picobot migrate`: it brings the PostgreSQL schema up to date as
// the owner role (granting the application role what it needs, with
// row-level security forced) and creates the S3 bucket when missing. Helm runs
// it as a pre-install/pre-upgrade hook; running it again is a no-op.
func migrate(args []string) error {
	fs := newFlags("migrate", `Usage: picobot migrate [flags]

Brings the PostgreSQL schema up to date and creates the S3 bucket (cluster mode; the chart runs it
as a Job). Configured by flags and PICOBOT_POSTGRES_URL, PICOBOT_S3_*.
`)
	appRole := fs.String("app-role", "picobot", "PostgreSQL role the gateway and session pods connect as (not a superuser).")
	timeout := fs.Duration("timeout", 5*time.Minute, "Give up after this long.")
	if err := parse(fs, args); err != nil {
		return err
	}
	owner := os.Getenv("PICOBOT_POSTGRES_OWNER_URL")
	if owner == "" {
		return fmt.Errorf("PICOBOT_POSTGRES_OWNER_URL (the schema owner's DSN) is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := postgres.Migrate(ctx, owner, *appRole); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "PostgreSQL schema is up to date")
	if bucket := os.Getenv(cluster.EnvS3Bucket); bucket != "" {
		s, err := s3blob.New(ctx, s3blob.Config{Bucket: bucket, Region: os.Getenv(cluster.EnvS3Region), Endpoint: os.Getenv(cluster.EnvS3Endpoint),
			UsePathStyle: os.Getenv(cluster.EnvS3PathStyle) == "true", AccessKeyID: os.Getenv(cluster.EnvS3AccessKey), SecretAccessKey: os.Getenv(cluster.EnvS3SecretKey)})
		if err != nil {
			return err
		}
		defer func() { _ = s.Close() }()
		if err := s.EnsureBucket(ctx); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "S3 bucket %s is ready\n", bucket)
	}
	return nil
}
