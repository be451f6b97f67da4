// GRPC module: see GRPCServer.swift
